"""The attribute names seglog's spans and metrics share: OpenTelemetry's messaging semantic
conventions (the registry's `messaging.*` attributes, development status), so a topic is
called the same in a trace and on a dashboard. Partition ids are strings, as the
conventions say."""

TOPIC = "messaging.destination.name"
PARTITION = "messaging.destination.partition.id"
GROUP = "messaging.consumer.group.name"
