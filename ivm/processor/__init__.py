"""The streaming runtime: the Spark job around the engine library, its Kafka I/O and the ``ivm`` command line.

Where a thing lives, by concern:

- here: the job (:mod:`.job`, :mod:`.submit`), one micro-batch (:mod:`.pipeline`), its plan (:mod:`.planning`),
  the configuration (:mod:`.config`), the control topic (:mod:`.control`), keyed results (:mod:`.publish`),
  bulk bootstrap (:mod:`.bootstrap`), the demo (:mod:`.demo`, :mod:`.data`) and the command line (:mod:`.cli`);
- :mod:`.codecs`: the Avro codecs (plain, the Confluent wire format, the compiled decoder);
- :mod:`.kafka`: the Kafka clients, topics, the outputs' producer, ``ivm produce`` and ``ivm subscribe``;
- :mod:`.state`: base relations and the input policy, snapshots, recovery, a killed run's leftovers;
- :mod:`.operations`: metrics, the heartbeat ``ivm status`` reads, logs, progress bars;
- :mod:`.placement`: the state on Spark's executors; :mod:`.local`: the local services; :mod:`.commands`: one
  module per ``ivm`` subcommand.

The runtime imports the engine library; the library (the rest of :mod:`ivm`) never imports the runtime.  Until
this release it was the top-level package ``processor``; a checkout keeps that name as a deprecated alias
(``processor/__init__.py``).
"""
