"""The XLA flags every test process compiles with, the suite's own and the subprocesses' alike.

Compiling dominates the suite on CPU, and these flags cut compile time at the tests' model
sizes far more than they slow the compiled code: backend optimization level 0 about halves
XLA:CPU's compile time; the legacy elemental emitters instead of the fusion emitters
(`--xla_cpu_use_fusion_emitters=false`) halve the backend compile again (four of the heaviest
test files: 161 s -> 119 s, compile 90 s -> 40 s). Production runs keep XLA's defaults.
"""

FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"
