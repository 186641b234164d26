"""How long `ivm run` takes to stop on SIGTERM, with the broker up, down, or killed during a batch.

Each repeat of each case runs in a fresh broker and a fresh `ivm run` child process (as a user runs
it): the triangle count over R, S, T is fed until batches commit, then

- ``up``: SIGTERM with the broker up;
- ``down``: the broker stopped, then SIGTERM (no batch in flight);
- ``in-flight``: the broker killed while a batch of 200,000 updates is being applied, then SIGTERM
  (its transaction cannot commit: the stop abandons it).

It prints, per case, the median, minimum and maximum seconds from the signal to the process's exit,
and how the processor said it stopped.  Usage: ``python bench/stops.py [--repeat 3]``
(``make bench-stops``).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import tempfile
import time
from pathlib import Path

from ivm.processor.codecs.avro import load_relation_codecs
from ivm.processor.config import PipelineConfig, QueryConfig, RelationConfig, dump_config
from ivm.processor.kafka.produce import UpdateProducer
from ivm.processor.kafka.topics import create_topics
from ivm.processor.local.kafka import KafkaBroker
from ivm.processor.local.stack import ProcessorProcess

CODECS = load_relation_codecs()
TRIANGLE = "Q() :- R(a,b), S(b,c), T(c,a)"


def _config(bootstrap: str, work: Path, batch: int) -> PipelineConfig:
    return PipelineConfig(
        bootstrap=bootstrap,
        dead_letter_topic="stop.dead-letter",
        relations=tuple(RelationConfig(r, f"stop.{r}", Path(f"relations/{r}.avsc")) for r in "RST"),
        queries=(QueryConfig("stop.q", TRIANGLE, "first_order"),),
        name="stop",
        state_dir=str(work / "state"),
        snapshot_every=0,
        max_offsets_per_trigger=batch,
        trigger_ms=100,
    )


def _produce(bootstrap: str, n: int, domain: int, seed: int) -> None:
    rng = random.Random(seed)
    topics = {r: f"stop.{r}" for r in "RST"}
    producer = UpdateProducer(bootstrap, CODECS, topics)
    for _ in range(n):
        rel = rng.choice("RST")
        producer.send_raw(topics[rel], *CODECS[rel].encode((rng.randrange(domain), rng.randrange(domain)), 1))
    producer.flush()


def _wait(predicate, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the processor did not get that far")
        time.sleep(0.05)


def once(case: str, work: Path) -> tuple[float, str]:
    """Seconds from SIGTERM to exit, and the processor's last 'stopped: ...' line."""
    broker = KafkaBroker.start(work / "kafka")
    try:
        in_flight = case == "in-flight"
        config = _config(broker.bootstrap, work, 200_000 if in_flight else 2_000)
        create_topics(broker.bootstrap, [r.topic for r in config.relations])
        _produce(broker.bootstrap, 1_000_000 if in_flight else 20_000, 3000 if in_flight else 200, seed=1)
        path = work / "pipeline.toml"
        path.write_text(dump_config(config))
        proc = ProcessorProcess(path, broker.bootstrap, work / "run.log", metrics_port=0)
        log = lambda: proc.log_path.read_text(errors="replace")  # noqa: E731
        if in_flight:
            _wait(lambda: "applying batch 1:" in log())
            broker.stop(kill=True)
        else:
            _wait(lambda: proc.batches_logged() >= 2)
            if case == "down":
                broker.stop()
        started = time.monotonic()
        os.kill(proc.proc.pid, signal.SIGTERM)
        proc.proc.wait(120)
        seconds = time.monotonic() - started
        stopped = [line for line in log().splitlines() if "stopped:" in line]
        return seconds, (stopped[-1].split("stopped:", 1)[1].strip()[:60] if stopped else "(no stop line)")
    finally:
        broker.stop(kill=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cases", nargs="+", default=["up", "down", "in-flight"])
    args = parser.parse_args()
    print(f"{'case':<10} {'median s':>9} {'min s':>7} {'max s':>7}  how it stopped")
    for case in args.cases:
        times, how = [], ""
        for i in range(args.repeat):
            with tempfile.TemporaryDirectory(prefix=f"ivm-bench-stop-{case}-{i}-") as work:
                seconds, how = once(case, Path(work))
            times.append(seconds)
        print(f"{case:<10} {statistics.median(times):>9.2f} {min(times):>7.2f} {max(times):>7.2f}  {how}", flush=True)


if __name__ == "__main__":
    main()
