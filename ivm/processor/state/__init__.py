"""The pipeline's state beside the engines': the base relations and the input policy (:mod:`.relations`,
compiled admission ``_admit_kernel``), snapshots (:mod:`.snapshots`), exactly-once recovery (:mod:`.recovery`),
a killed run's leftovers (:mod:`.leftovers`), and the garbage collector kept off the state (:mod:`.collector`)."""
