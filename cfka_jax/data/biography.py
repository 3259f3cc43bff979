"""The synthetic Biography world (spec cfka_stoc.md §3.2, §3.4, §3.6; decisions §11 row 4).

A world is a deterministic function of a ``BiographyConfig``: one ``numpy.random.Generator`` seeded with
``config.seed`` draws, in this fixed order, the full names (without replacement from the
first × middle × last product, i.e. unique, like the reference's resample-on-collision), the five attribute values
(each independent and uniform), the template of every sentence and the sentence orders.

People 0 … P−1 are the PT ("original") population, P … P+C−1 the disjoint CPT ("continual") one. Each person
gets ``augment_times = K + 3`` biographies: i = 0 … K−1 are training (``number`` 1 … K), i = K … K+2 are test
(``number`` 0, 1, 2). A biography is one sentence per attribute joined by single spaces, in canonical order
[birthplace, birthdate, university, major, company] unless shuffled. The reference shuffles biography i iff
i ≤ augment_times − 3 = K, which also shuffles test biography 0 (an off-by-one against its own comment);
``shuffle_test0=True`` (default) reproduces it, ``False`` shuffles the training biographies only.

Replay pools of real old data (§3.6): ``'all'`` = the number-1 training biography of every PT person;
``'half'`` = the number-1 and number-2 biographies at ``pt_train`` list position ≤ len(pt_train) // 2, i.e. the
first half of the PT people × 2 plus, as in the reference (position ≤ 250,000 of 500,000), the number-1
biography of the person just past the half.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from cfka_jax.data.pools import PoolSizes, ValuePools, project_pools, read_pool_json
from cfka_jax.data.templates import ATTRIBUTES, Templates, fill, project_templates, read_template_table

NUM_TEST_BIOS = 3
REPLAY_KINDS = ("all", "half")
NAME_FIELDS = ("first_names", "middle_initials", "last_names")


@dataclasses.dataclass(frozen=True)
class BiographyConfig:
    """Sizes, seed and switches of a Biography world.

    Attributes:
      num_pt_people: P, the PT population (reference 100,000).
      num_cpt_people: C, the disjoint CPT population (reference 20,000).
      train_bios_per_person: K training biographies per person (``5aug``: 5; ``1aug``: 1).
      seed: seed of the numpy Generator; the world is a deterministic function of the config.
      shuffle_test0: reproduce the reference's shuffling of test biography 0 (§11 row 4 ``data.shuffle_test0``).
      pool_sizes: sizes of the project's own pools (ignored for pools read from ``pool_path``).
      pool_path: optional reference-format ``all_possible_features.json``.
      template_path: optional template table (``.parquet``/``.csv``); default: the project's templates.
      name_pool: optional ``(first names, middle initials, last names)``: use only the first n of each name pool,
        so that name parts are shared by many people as in the reference's 100k world (1,000 × 26 × 1,000 names for
        120k people: a first name is held by ~100 PT people, a "First M." prefix by ~4). None (default): the full
        pools (and the cache keys of worlds made before this option). Attribute values are drawn from the same
        pools for PT and CPT people either way. ``name_sharing`` measures the result.
    """

    num_pt_people: int
    num_cpt_people: int
    train_bios_per_person: int = 5
    seed: int = 2025
    shuffle_test0: bool = True
    pool_sizes: PoolSizes = PoolSizes()
    pool_path: str | None = None
    template_path: str | None = None
    name_pool: tuple[int, int, int] | None = None

    def __post_init__(self):
        if self.name_pool is not None:
            pool = tuple(self.name_pool)
            if len(pool) != 3 or any(not isinstance(n, int) or isinstance(n, bool) or n < 1 for n in pool):
                raise ValueError(f"name_pool must be 3 integers >= 1 (first names, middle initials, last names), "
                                 f"got {self.name_pool!r}")
            object.__setattr__(self, "name_pool", pool)
        if self.num_pt_people < 1:
            raise ValueError(f"num_pt_people must be >= 1, got {self.num_pt_people}")
        if self.num_cpt_people < 0:
            raise ValueError(f"num_cpt_people must be >= 0, got {self.num_cpt_people}")
        if self.train_bios_per_person < 1:
            raise ValueError(f"train_bios_per_person must be >= 1, got {self.train_bios_per_person}")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")

    @property
    def augment_times(self) -> int:
        """Biographies per person, training plus test (the reference's ``augment_times``)."""
        return self.train_bios_per_person + NUM_TEST_BIOS

    @property
    def num_people(self) -> int:
        return self.num_pt_people + self.num_cpt_people

    def is_shuffled(self, i: int) -> bool:
        """Whether biography i (0-based, of ``augment_times``) has shuffled sentences."""
        last = self.augment_times - 3 if self.shuffle_test0 else self.augment_times - 4
        return i <= last


@dataclasses.dataclass(frozen=True)
class Person:
    """One individual: ``values[a]`` is the value of ``ATTRIBUTES[a]``."""

    pid: int
    fullname: str
    values: tuple[str, ...]
    is_original: bool


@dataclasses.dataclass(frozen=True)
class Biography:
    """One biography. ``order`` lists attribute indices in sentence order; ``templates`` the template index per
    attribute (indexed by attribute, not by sentence)."""

    pid: int
    number: int
    text: str
    order: tuple[int, ...]
    templates: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class World:
    """People and biographies of one config; splits ordered by person, then by biography index."""

    config: BiographyConfig
    people: tuple[Person, ...]
    pt_train: tuple[Biography, ...]
    pt_test: tuple[Biography, ...]
    cpt_train: tuple[Biography, ...]
    cpt_test: tuple[Biography, ...]

    @property
    def splits(self) -> dict[str, tuple[Biography, ...]]:
        return {"pt_train": self.pt_train, "pt_test": self.pt_test, "cpt_train": self.cpt_train,
                "cpt_test": self.cpt_test}

    def replay_pool(self, kind: str) -> tuple[Biography, ...]:
        """Real old-data replay biographies: ``'all'`` or ``'half'`` (module docstring, §3.6)."""
        return replay_pool(self.pt_train, kind)


def replay_pool(pt_train: tuple[Biography, ...], kind: str) -> tuple[Biography, ...]:
    """The reference's ``cpt_rehersal_{all,half}`` selection from the person-ordered ``pt_train`` list."""
    if kind == "all":
        return tuple(b for b in pt_train if b.number == 1)
    if kind == "half":
        limit = len(pt_train) // 2
        return tuple(b for pos, b in enumerate(pt_train) if pos <= limit and b.number in (1, 2))
    raise ValueError(f"replay kind must be one of {REPLAY_KINDS}, got {kind!r}")


def load_pools(config: BiographyConfig) -> ValuePools:
    """The config's pools: the file at ``pool_path`` over the project's pools, else the project's."""
    base = project_pools(config.pool_sizes)
    pools = read_pool_json(config.pool_path, fallback=base) if config.pool_path else base
    if config.name_pool is None:
        return pools
    cut = {}
    for field, n in zip(NAME_FIELDS, config.name_pool):
        values = getattr(pools, field)
        if n > len(values):
            raise ValueError(f"name_pool asks for {n} {field} but the pools hold {len(values)}")
        cut[field] = values[:n]
    return dataclasses.replace(pools, **cut)


def load_templates(config: BiographyConfig) -> Templates:
    return read_template_table(config.template_path) if config.template_path else project_templates()


def _draw_people(config: BiographyConfig, pools: ValuePools, rng: np.random.Generator) -> tuple[Person, ...]:
    n = config.num_people
    if n > pools.num_names:
        raise ValueError(f"{n} people need unique names but the pools give only {pools.num_names}")
    codes = rng.choice(pools.num_names, size=n, replace=False)
    n_mid, n_last = len(pools.middle_initials), len(pools.last_names)
    first, rest = np.divmod(codes, n_mid * n_last)
    mid, last = np.divmod(rest, n_last)
    draw = lambda pool: rng.integers(len(pool), size=n)  # noqa: E731
    place, month, day, year = draw(pools.birthplaces), draw(pools.months), draw(pools.days), draw(pools.years)
    uni, major, company = draw(pools.universities), draw(pools.majors), draw(pools.companies)
    people = []
    for p in range(n):
        name = f"{pools.first_names[first[p]]} {pools.middle_initials[mid[p]]} {pools.last_names[last[p]]}"
        date = f"{pools.months[month[p]]} {pools.days[day[p]]}, {pools.years[year[p]]}"
        values = (pools.birthplaces[place[p]], date, pools.universities[uni[p]], pools.majors[major[p]],
                  pools.companies[company[p]])
        people.append(Person(p, name, values, p < config.num_pt_people))
    return tuple(people)


def _format_string(template: str, attribute: str) -> str:
    """``template`` as a ``str.format`` pattern with fields ``name`` and ``value`` (same result as ``fill``)."""
    escaped = template.replace("{", "{{").replace("}", "}}")
    return fill(escaped, attribute, "{name}", "{value}")


def _draw_bios(config: BiographyConfig, templates: Templates, people, rng: np.random.Generator):
    """All biographies, shape (people, augment_times), as nested lists."""
    n, m, a = len(people), config.augment_times, len(ATTRIBUTES)
    tmpl = np.stack([rng.integers(len(t), size=(n, m)) for t in templates.by_attribute], axis=-1)
    perm = np.argsort(rng.random((n, m, a)), axis=-1, kind="stable")
    shuffled = np.array([config.is_shuffled(i) for i in range(m)])
    order = np.where(shuffled[None, :, None], perm, np.arange(a)[None, None, :])
    fmts = [[_format_string(t, ATTRIBUTES[k]) for t in temps] for k, temps in enumerate(templates.by_attribute)]
    order_l, tmpl_l, k_train = order.tolist(), tmpl.tolist(), config.train_bios_per_person
    out = []
    for person in people:
        name, values, row = person.fullname, person.values, []
        for i, (o, t) in enumerate(zip(order_l[person.pid], tmpl_l[person.pid])):
            text = " ".join([fmts[k][t[k]].format(name=name, value=values[k]) for k in o])
            row.append(Biography(person.pid, i + 1 if i < k_train else i - k_train, text, tuple(o), tuple(t)))
        out.append(row)
    return out


def generate_world(config: BiographyConfig) -> World:
    """Generate the Biography world of ``config`` (deterministic; see the module docstring).

    Raises:
      ValueError: more people than unique names, or invalid pool/template files.
    """
    pools, templates = load_pools(config), load_templates(config)
    rng = np.random.default_rng(config.seed)
    people = _draw_people(config, pools, rng)
    bios = _draw_bios(config, templates, people, rng)
    k, p = config.train_bios_per_person, config.num_pt_people
    flat = lambda rows, sl: tuple(b for row in rows for b in row[sl])  # noqa: E731
    return World(config, people, flat(bios[:p], slice(0, k)), flat(bios[:p], slice(k, None)),
                 flat(bios[p:], slice(0, k)), flat(bios[p:], slice(k, None)))

