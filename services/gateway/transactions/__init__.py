"""The gateway's transaction coordinator (Kafka's KIP-98 transactions): a typed core over
`__transaction_state`, with no wire format of its own; kafka/txn_apis.py and
kafka/txn_admin_apis.py are its Kafka adapters, kafka/produce_apis.py asks it to verify
transactional batches."""
