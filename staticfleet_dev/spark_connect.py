"""A Spark Connect server started from the pyspark package (its jars ship the server), for the
runtime's tests and the throughput bench's `connect` mode."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pyspark

from staticfleet_dev.procs import free_port, port_open


@dataclass
class ConnectServer:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def start_connect_server(workdir: Path, timeout: float = 180,
                         driver_memory: str = "1g") -> ConnectServer:
    """`spark-submit --class SparkConnectServer` in the foreground (the jar ships with pyspark).
    Every batch a client sends lives in the server's heap (`driver_memory`) while it runs."""
    spark_home = Path(pyspark.__file__).parent
    port = free_port()
    log = workdir / "spark-connect.log"
    cmd = [str(spark_home / "bin" / "spark-submit"),
           "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
           "--master", "local[2]",
           "--driver-memory", driver_memory,
           "--conf", f"spark.connect.grpc.binding.port={port}",
           "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
           "--conf", "spark.ui.enabled=false",
           "--conf", "spark.driver.bindAddress=127.0.0.1",
           "--conf", "spark.driver.host=127.0.0.1",
           "--conf", "spark.sql.shuffle.partitions=2",
           "spark-internal"]
    env = {**os.environ, "SPARK_HOME": str(spark_home)}
    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, cwd=workdir,
                                start_new_session=True)
    server = ConnectServer(proc, f"sc://127.0.0.1:{port}", log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"Spark Connect server exited:\n{log.read_text()[-3000:]}")
        if "Spark Connect server started" in log.read_text(errors="replace") and port_open(port):
            return server
        time.sleep(0.5)
    server.stop()
    raise AssertionError(f"Spark Connect server not up after {timeout:.0f}s:\n"
                         f"{log.read_text()[-3000:]}")
