"""How the data jobs run: the entry points' shared steps, the ordered pool of worker
processes, the sharded and atomically renamed outputs, and the Apache Beam runtime."""
