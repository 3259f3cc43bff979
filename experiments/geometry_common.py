"""Shared pieces of the ``cfka geometry`` subcommands: scales, the synthetic base model, result writers.

A :class:`Scale` fixes the synthetic task, the model and the step counts of every subcommand; ``smoke`` runs in
seconds for the tests, ``small`` is the measured scale of ``docs/geometry.md`` (2 CPU cores).
"""

from __future__ import annotations

import dataclasses
import pathlib


from cfka_jax import jsonio
from cfka_jax.geometry.synthetic import ModelConfig, TaskConfig, fit, make_task


@dataclasses.dataclass(frozen=True)
class Scale:
    """Sizes of one scale.

    Attributes:
      task, model: the synthetic task and its model.
      pretrain_steps: AdamW steps of the base model on the pretraining classes.
      update_samples, update_tokens, obs_samples, obs_tokens: the §3.4 token grid (samples × first tokens).
      max_pairs: pairs kept from the Cartesian product (``Random(pair_seed)``).
      sft_steps: steps of the energy-masking and warm-up fine-tunes; ``coldstart_steps``: checkpoints.
      bio_preset: the Biography preset of the transmission study; ``sft_tasks_steps``: its SFT steps.
    """

    task: TaskConfig
    model: ModelConfig
    pretrain_steps: int
    update_samples: int
    update_tokens: int
    obs_samples: int
    obs_tokens: int
    max_pairs: int
    sft_steps: int
    coldstart_steps: tuple[int, ...]
    bio_preset: str
    sft_task_steps: int


SCALES = {
    "smoke": Scale(TaskConfig(num_classes=3, train_per_class=4, test_per_class=2, pretrain_classes=3,
                              pretrain_per_class=8, template_len=3, input_len=3),
                   ModelConfig(hidden=16, layers=2, heads=2, kv_heads=1, intermediate=24), pretrain_steps=3,
                   update_samples=2, update_tokens=3, obs_samples=2, obs_tokens=3, max_pairs=20, sft_steps=2,
                   coldstart_steps=(0, 2), bio_preset="smoke", sft_task_steps=2),
    "small": Scale(TaskConfig(), ModelConfig(), pretrain_steps=600, update_samples=10, update_tokens=8,
                   obs_samples=10, obs_tokens=8, max_pairs=512, sft_steps=200, coldstart_steps=(0, 25, 50, 100, 200),
                   bio_preset="small", sft_task_steps=40),
}


def scale(name: str) -> Scale:
    if name not in SCALES:
        raise ValueError(f"unknown scale {name!r}; choose from {sorted(SCALES)}")
    return SCALES[name]


def base_model(s: Scale, arch: str = "qwen", vocab_size: int | None = None, seed: int = 0):
    """(task, base model fitted on the pretraining classes, its loss curve). ``vocab_size`` (≥ the task's) gives
    the model more embedding/head rows than the task uses (a real model's vocabulary, for benchmarks). ``seed``
    draws the task (templates, rules, examples), the model's initialisation and the fit's batch order (seed 0 is
    the scale's own task and model)."""
    task = make_task(dataclasses.replace(s.task, seed=seed))
    if vocab_size is not None and vocab_size < s.task.vocab_size:
        raise ValueError(f"vocab_size {vocab_size} is below the task's {s.task.vocab_size} ids")
    model_cfg = dataclasses.replace(s.model, arch=arch, seed=seed)
    batch = min(32, len(task.pretrain_tokens))
    model, losses = fit(model_cfg.build(vocab_size or s.task.vocab_size), task, steps=s.pretrain_steps,
                        batch_size=batch, seed=seed)
    return task, model, losses


def markdown_table(header: list[str], rows: list[list]) -> str:
    """A GitHub markdown table; floats with 4 significant digits."""
    def fmt(v):
        return f"{v:.4g}" if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def write_markdown(out: pathlib.Path, name: str, title: str, body: str) -> pathlib.Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.md"
    jsonio.write_text_atomic(path, f"# {title}\n\n{body}")
    return path


def save_plot(fig, out: pathlib.Path, name: str) -> pathlib.Path:
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
