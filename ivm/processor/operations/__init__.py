"""Operating a running pipeline: Prometheus metrics (:mod:`.metrics`), the heartbeat ``ivm status`` reads
(:mod:`.heartbeat`), log hygiene (:mod:`.logs`) and the command line's progress bars (:mod:`.progress`)."""
