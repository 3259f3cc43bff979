"""Benchmark: weak scaling of a sharded theory sweep over 1, 2, 4 and 8 forced host devices.

    python bench/sweep_scaling.py [--per-device 128] [--steps 200] [--devices 1,2,4,8]

Each device count runs in its own process (``--xla_force_host_platform_device_count``) a grid of
``per_device × devices`` configurations split over a ``data`` mesh of that many devices
(``theory/rate_sweep.sweep_sharded``), so the work per device is constant: flat wall time means perfect weak
scaling. Forced host devices share this machine's physical cores, so beyond the core count the time must grow
with the device count; the ratio to the cores available is printed beside each figure. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = """
import json, sys, time
import jax
from cfka_jax.parallel.mesh import MeshConfig, make_mesh
from cfka_jax.theory.rate_sweep import make_grid, sweep_sharded
from cfka_jax.theory.train import SGDConfig
from cfka_jax.theory.world import WorldConfig, make_world

n, per, steps = (int(x) for x in sys.argv[1:4])
world = make_world(WorldConfig())
grid = make_grid(seeds=range(per * n // 2), eta_ys=[0.5, 1.0], eta_zs=[0.02])
cfg = SGDConfig(steps=steps, batch_size=16, log_every=steps)
mesh = make_mesh(MeshConfig(data=n))
jax.block_until_ready(sweep_sharded(world, grid, cfg=cfg, mesh=mesh))  # compile
times = []
for _ in range(3):
    t0 = time.perf_counter()
    jax.block_until_ready(sweep_sharded(world, grid, cfg=cfg, mesh=mesh))
    times.append(time.perf_counter() - t0)
print(json.dumps({"devices": n, "configs": int(grid.seed.shape[0]), "seconds": min(times)}))
"""


def run(n: int, per_device: int, steps: int) -> dict:
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={n}"}
    out = subprocess.run([sys.executable, "-c", CHILD, str(n), str(per_device), str(steps)], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-device", type=int, default=128, help="configurations per device (even)")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--devices", default="1,2,4,8")
    a = ap.parse_args()
    cores = os.cpu_count() or 1
    rows = [run(int(n), a.per_device, a.steps) for n in a.devices.split(",")]
    base = rows[0]["seconds"]
    print(f"{'devices':>7} {'configs':>7} {'seconds':>8} {'vs 1 device':>11} {'devices/cores':>13}")
    for r in rows:
        r["vs_one_device"] = r["seconds"] / base
        print(f"{r['devices']:>7} {r['configs']:>7} {r['seconds']:>8.3f} {r['vs_one_device']:>10.2f}x "
              f"{r['devices'] / cores:>13.1f}")
    print(json.dumps({"bench": "sweep_scaling", "cores": cores, "per_device": a.per_device, "steps": a.steps,
                      "rows": rows}))


if __name__ == "__main__":
    main()
