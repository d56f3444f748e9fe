"""`--serve vllm`: needlepoint starts the inference servers of a run itself, on free ports of
127.0.0.1 and disjoint GPU groups, waits for them, hands their URLs to the run and stops them
at its end, on Ctrl-C, SIGTERM and failure, and (through a guard process) after its own death.

- command.py: each engine's command line and the GPU groups;
- process.py: one server process, its log and its stop;
- guard.py: the watchdog that stops a server's whole process tree (also when needlepoint is gone)
  and scrubs credentials from its log;
- plan.py: the servers of one run;
- flags.py: the `needlepoint eval` flags.
"""

from needlepoint.serve.command import ENGINES, ServeSpec
from needlepoint.serve.plan import ServePlan

SERVE_DIR = "serve"  # the servers' logs, inside the run folder

__all__ = ["ENGINES", "SERVE_DIR", "ServePlan", "ServeSpec"]
