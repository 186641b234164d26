"""Where the engines' state lives: ``[processor] placement = "executors"`` (README, "Running on a Spark cluster").

- ``routing.py``: which slices hold a relation tuple (HyperCube shards of every query reading it);
- ``routes.py``: a micro-batch decoded and split into the slices' records (runs on the executors);
- ``slices.py``: one slice's pipeline (the driver's ``Pipeline`` restricted to the slice) and its
  batch versions;
- ``host.py``: the shard host process that keeps slices in memory, rebuilds and snapshots them;
- ``spark.py``: the Spark plan of a micro-batch (route and send on the executors, seal on the hosts);
- ``driver.py``: the driver's side: results added up from the slices' parts, nothing else kept.
"""
