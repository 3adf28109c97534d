"""Every librdkafka client knarr creates, built from one settings model and closed one way.

`settings` turns the configuration into librdkafka properties for each kind of client (the
source's consumer, the sinks' and the DLQ's producers, Spark's readers, the operator's lag
reader), so SASL/TLS and other connection settings reach all of them. `clients` opens and
closes them; see its docstring for the lifetime rules that keep librdkafka from aborting
the process.
"""
