"""seglog: a partitioned log store whose files are Kafka's own format, byte for byte."""

__version__ = "0.1.0"
