"""The Avro codecs of relation updates and outputs (DESIGN §4): plain Avro (:mod:`.avro`), the Confluent wire
format through a Schema Registry (:mod:`.confluent`), and the vectorized decoder of all-int records
(:mod:`.varint`, compiled as ``_varint_kernel``)."""
