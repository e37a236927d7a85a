"""A study file: variants x scenarios x seeds of ordinary runs, read and checked once.

.. code-block:: yaml

    env: spiders_fly          # the report's environment: grf is reported by mean and sd
    metric: success_rate      # the eval.csv column of the curves (default: win_rate)
    mode: max                 # optional: is a higher metric better (max) or a lower (min)?
    dir: runs/studies/smoke   # the study directory, relative to the current directory
    total_samples: 2048       # train.total_samples of every trial
    seeds: [0]
    scenarios: [3m, 5m_vs_6m] # optional: env.scenario of each trial
    variants:                 # name -> {config, overrides, label}, or a list of names
      ace: {config: configs/spiders_fly_5x5.yaml, overrides: [], label: ACE}
    overrides: [train.eval_every=512]   # optional: every trial, new or resumed
    variant_overrides:                  # optional: one variant's trials, new or resumed
      ace: [train.compile=true]         # (after overrides; e.g. a switch other learners refuse)
    resources: {cpus: 1, gpus: 0}       # optional: what Ray reserves for a trial
    max_failures: 2                     # optional: retries of a trial whose worker raised
    results: docs/smax_runs   # optional: where finished trials' curves are kept (committed)
    at: [10000, 50000]        # optional: the report's table of the metric at these steps
    window: 5000              # optional: ... from each seed's evaluations this near (10000)

``variants`` as a list of names takes them from the catalogue of ``env`` in
``configs/studies/variants.yaml`` (:func:`catalogue`). A trial is the run directory
``<dir>/<variant>_<scenario>_seed<seed>`` (``<variant>_seed<seed>`` without scenarios).

``results`` keeps a study's curves where its run directories do not survive (a new
machine, a cluster's scratch disk): a finished trial's ``eval.csv`` and ``study.json`` are
copied there as ``<trial>.csv`` and ``<trial>.json``, the report reads a trial whose run
directory holds none from there, so ``--report`` rebuilds the tables from committed
files, and a trial kept there to the study's budget is not trained again.
"""
from __future__ import annotations

import copy
import fnmatch
import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import yaml

#: The repository: a config path of a study file may be relative to it.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: Keys of a study file, of a variant and of ``resources``.
KEYS = ("env", "metric", "mode", "dir", "total_samples", "seeds", "scenarios", "variants",
        "overrides", "variant_overrides", "resources", "max_failures", "results", "at", "window")
VARIANT_KEYS = ("config", "overrides", "label")
RESOURCE_KEYS = ("cpus", "gpus")
#: Config keys a study sets for each trial: an override may not set them.
OWN_KEYS = ("seed", "env.scenario", "run.dir", "run.name", "train.total_samples")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
#: The named variants of each environment.
CATALOGUE = os.path.join(ROOT, "configs", "studies", "variants.yaml")


@dataclass(frozen=True)
class Variant:
    """One method of a study: a config file and the overrides that make it."""

    name: str
    config: str
    """The config file (absolute)."""
    overrides: Tuple[str, ...] = ()
    """``key=value`` of the variant's new runs (a resumed run keeps its ``config.yaml``)."""
    label: str = ""
    """Its name in the report (default: ``name``)."""


@dataclass(frozen=True)
class Trial:
    """One run of a study."""

    variant: str
    scenario: Optional[str]
    seed: int
    run_dir: str
    config: str
    start: Tuple[str, ...]
    """Overrides of a new run: seed, scenario, then the variant's."""
    overrides: Tuple[str, ...] = ()
    """Overrides of every session, new or resumed: the study's ``overrides``, then its
    variant's ``variant_overrides``."""

    @property
    def name(self) -> str:
        return os.path.basename(self.run_dir)


@dataclass(frozen=True)
class Study:
    """A study file, checked (see the module's docstring for the keys)."""

    path: str
    env: str
    dir: str
    total_samples: int
    seeds: Tuple[int, ...]
    variants: Dict[str, Variant]
    scenarios: Tuple[Optional[str], ...] = (None,)
    overrides: Tuple[str, ...] = ()
    variant_overrides: Dict[str, Tuple[str, ...]] = field(default_factory=dict)
    """Overrides of one variant's trials, new or resumed, after ``overrides``."""
    metric: str = "win_rate"
    mode: str = "max"
    cpus: float = 1.0
    gpus: float = 0.0
    max_failures: int = 2
    results: Optional[str] = None
    """Where finished trials' ``eval.csv`` are kept as ``<trial>.csv`` (absolute)."""
    at: Tuple[int, ...] = ()
    """Steps at which the report tabulates the metric over seeds."""
    window: int = 10_000
    """Evaluations within this many steps of a point of ``at`` count for it."""
    cwd: str = "."
    """Where a trial's ``acegnn train`` runs (:func:`load_study`: the directory it was
    called from), so that relative paths in overrides resolve as on its command line."""
    trials: List[Trial] = field(init=False, compare=False, repr=False)
    """Every (variant, scenario, seed), in this order."""

    def __post_init__(self) -> None:
        trials = []
        for variant in self.variants.values():
            for scenario in self.scenarios:
                for seed in self.seeds:
                    name = "_".join(p for p in (variant.name, scenario, f"seed{seed}") if p)
                    start = (f"seed={seed}",
                             *([f"env.scenario={scenario}"] if scenario else []),
                             *variant.overrides)
                    every = (*self.overrides, *self.variant_overrides.get(variant.name, ()))
                    trials.append(Trial(variant.name, scenario, seed,
                                        os.path.join(self.dir, name), variant.config, start,
                                        every))
        object.__setattr__(self, "trials", trials)

    @property
    def name(self) -> str:
        return os.path.splitext(os.path.basename(self.path))[0]

    def only(self, patterns: List[str]) -> "Study":
        """The study with those of its trials whose names match one of ``patterns``
        (shell patterns: ``ace_rec_wo_ia_*``, ``*_seed2``), in the study's order.

        Raises:
            ValueError: a pattern that matches no trial (naming the trials).
        """
        for pattern in patterns:
            if not any(fnmatch.fnmatchcase(t.name, pattern) for t in self.trials):
                raise ValueError(f"{self.path}: --trials {pattern!r} matches none of the "
                                 f"study's trials ({', '.join(t.name for t in self.trials)})")
        chosen = copy.copy(self)
        object.__setattr__(chosen, "trials", [
            t for t in self.trials if any(fnmatch.fnmatchcase(t.name, p) for p in patterns)])
        return chosen

    @property
    def labels(self) -> Dict[str, Dict[str, str]]:
        """``{env: {variant: label}}``, as :mod:`acegnn.study.report` names variants."""
        return {self.env: {v.name: v.label or v.name for v in self.variants.values()}}

    def configs(self) -> List[Tuple[str, str, List[str]]]:
        """Each variant's config with each scenario and the study's overrides, as
        ``(where, config file, overrides)``: what :func:`acegnn.cli.check_study` loads
        before training, so that a wrong file or a misspelt key fails then, not hours
        into the study."""
        out, seen = [], set()
        for trial in self.trials:
            if (trial.variant, trial.scenario) not in seen:
                seen.add((trial.variant, trial.scenario))
                where = f"variant {trial.variant}" + (f", scenario {trial.scenario}"
                                                      if trial.scenario else "")
                out.append((where, trial.config, [*trial.start, *trial.overrides]))
        return out


def _fail(path: str, key: str, want: str, got: Any) -> ValueError:
    return ValueError(f"{path}: {key} must be {want} (got {got!r})")


def _overrides(path: str, key: str, value: Any) -> Tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(o, str) and "=" in o for o in value):
        raise _fail(path, key, "a list of key=value strings", value)
    for o in value:
        if o.split("=", 1)[0].strip() in OWN_KEYS:
            raise ValueError(f"{path}: {key}: {o!r} sets a key the study sets for each trial "
                             f"({', '.join(OWN_KEYS)})")
    return tuple(value)


def _variant_overrides(path: str, value: Any, variants: Dict[str, Variant]
                       ) -> Dict[str, Tuple[str, ...]]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail(path, "variant_overrides", "a mapping of variant names to overrides", value)
    for name in value:
        if name not in variants:
            raise ValueError(f"{path}: variant_overrides: no variant {name!r} in the study "
                             f"(its variants: {', '.join(variants)})")
    return {name: _overrides(path, f"variant_overrides.{name}", o) for name, o in value.items()}


def _unknown(path: str, where: str, got: dict, keys: Tuple[str, ...]) -> None:
    bad = sorted(set(got) - set(keys))
    if bad:
        raise ValueError(f"{path}: unknown key {where}{bad[0]!r} (valid keys: {', '.join(keys)})")


def _config_path(study: str, name: str, value: Any) -> str:
    """A variant's config file: relative to the study file, else to the repository."""
    if not isinstance(value, str) or not value:
        raise _fail(study, f"variants.{name}.config", "a path to a config file", value)
    for base in (os.path.dirname(os.path.abspath(study)), ROOT):
        path = os.path.join(base, value)
        if os.path.isfile(path):
            return os.path.abspath(path)
    raise ValueError(f"{study}: variants.{name}.config: no file {value!r} beside the study "
                     f"file or in the repository")


def _variant(path: str, name: Any, spec: Any) -> Variant:
    if not isinstance(name, str) or not NAME.match(name):
        raise _fail(path, "a variant's name", "letters, digits, '_', '.' or '-'", name)
    if not isinstance(spec, dict):
        raise _fail(path, f"variants.{name}", "a mapping with config, overrides and label", spec)
    _unknown(path, f"variants.{name}.", spec, VARIANT_KEYS)
    if "config" not in spec:
        raise ValueError(f"{path}: variants.{name} needs a config")
    label = spec.get("label", name)
    if not isinstance(label, str):
        raise _fail(path, f"variants.{name}.label", "a string", label)
    return Variant(name, _config_path(path, name, spec["config"]),
                   _overrides(path, f"variants.{name}.overrides", spec.get("overrides")), label)


def _read(path: str, what: str) -> dict:
    if not os.path.isfile(path):
        raise ValueError(f"no {what} {path}")
    with open(path) as f:
        try:
            raw = yaml.safe_load(f)
        except yaml.YAMLError as e:
            raise ValueError(f"{path}: not YAML: {e}") from None
    if not isinstance(raw, dict):
        raise _fail(path, "the file", "a mapping of keys", raw)
    return raw


def catalogue(env: str, path: str = CATALOGUE) -> Dict[str, Variant]:
    """The named variants of ``env`` (the file's ``env:`` mapping of variants).

    Raises:
        ValueError: naming the file and the environment or the bad variant.
    """
    raw = _read(path, "variant catalogue")
    if env not in raw:
        raise ValueError(f"{path}: no variants of env {env!r} (it has: {', '.join(raw)})")
    if not isinstance(raw[env], dict) or not raw[env]:
        raise _fail(path, env, "a mapping of variant names to {config, overrides, label}",
                    raw[env])
    return {n: _variant(path, n, v) for n, v in raw[env].items()}


def _variants(path: str, env: str, value: Any) -> Dict[str, Variant]:
    """A study's ``variants``: a mapping of its own, or names from :func:`catalogue`."""
    if isinstance(value, list) and value:
        if not all(isinstance(n, str) for n in value) or len(set(value)) != len(value):
            raise _fail(path, "variants", "distinct variant names", value)
        named = catalogue(env)
        unknown = [n for n in value if n not in named]
        if unknown:
            raise ValueError(f"{path}: variants: {CATALOGUE} has no {env} variant "
                             f"{unknown[0]!r} (its {env} variants: {', '.join(named)})")
        return {n: named[n] for n in value}
    if not isinstance(value, dict) or not value:
        raise _fail(path, "variants", "a mapping of names to {config, overrides, label}, or "
                    "a list of names from the catalogue", value)
    return {n: _variant(path, n, v) for n, v in value.items()}


def load_study(path: str, study_dir: Optional[str] = None) -> Study:
    """Read and check a study file (``study_dir`` replaces its ``dir``). Its ``dir``
    and the trials' working directory (:attr:`Study.cwd`) are taken from the current
    directory.

    Raises:
        ValueError: naming the file and the bad key or value.
    """
    raw = _read(path, "study file")
    _unknown(path, "", raw, KEYS)
    for key in ("env", "total_samples", "seeds", "variants"):
        if key not in raw:
            raise ValueError(f"{path}: {key} is missing")
    env, metric, mode = raw["env"], raw.get("metric", "win_rate"), raw.get("mode", "max")
    for key, value in (("env", env), ("metric", metric)):
        if not isinstance(value, str) or not value:
            raise _fail(path, key, "a name", value)
    if mode not in ("max", "min"):
        raise _fail(path, "mode", "max or min (is a higher metric better?)", mode)
    total = raw["total_samples"]
    if isinstance(total, bool) or not isinstance(total, int) or total <= 0:
        raise _fail(path, "total_samples", "a positive integer", total)
    seeds = raw["seeds"]
    if (not isinstance(seeds, list) or not seeds
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)
            or len(set(seeds)) != len(seeds)):
        raise _fail(path, "seeds", "a non-empty list of distinct integers >= 0", seeds)
    scenarios = raw.get("scenarios")
    if scenarios is not None and (
            not isinstance(scenarios, list) or not scenarios
            or not all(isinstance(s, str) and NAME.match(s) for s in scenarios)
            or len(set(scenarios)) != len(scenarios)):
        raise _fail(path, "scenarios", "a non-empty list of distinct scenario names", scenarios)
    variants = _variants(path, env, raw["variants"])
    resources = raw.get("resources") or {}
    if not isinstance(resources, dict):
        raise _fail(path, "resources", "a mapping with cpus and gpus", resources)
    _unknown(path, "resources.", resources, RESOURCE_KEYS)
    cpus, gpus = resources.get("cpus", 1), resources.get("gpus", 0)
    for key, value, want in (("cpus", cpus, "a number > 0"), ("gpus", gpus, "a number >= 0")):
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or value < 0 or (key == "cpus" and value == 0)):
            raise _fail(path, f"resources.{key}", want, value)
    failures = raw.get("max_failures", 2)
    if isinstance(failures, bool) or not isinstance(failures, int) or failures < 0:
        raise _fail(path, "max_failures", "an integer >= 0", failures)
    out_dir = study_dir or raw.get("dir") or os.path.join(
        "runs", "studies", os.path.splitext(os.path.basename(path))[0])
    if not isinstance(out_dir, str):
        raise _fail(path, "dir", "a directory", out_dir)
    results = raw.get("results")
    if results is not None and (not isinstance(results, str) or not results):
        raise _fail(path, "results", "a directory", results)
    at, window = raw.get("at") or [], raw.get("window", 10_000)
    if not isinstance(at, list) or not all(isinstance(x, int) and not isinstance(x, bool)
                                           and x > 0 for x in at):
        raise _fail(path, "at", "a list of positive step counts", at)
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise _fail(path, "window", "an integer >= 0", window)
    study = Study(path=path, env=env, dir=os.path.abspath(out_dir), total_samples=total,
                  seeds=tuple(seeds),
                  variants=variants,
                  scenarios=tuple(scenarios) if scenarios else (None,),
                  overrides=_overrides(path, "overrides", raw.get("overrides")),
                  variant_overrides=_variant_overrides(path, raw.get("variant_overrides"),
                                                       variants),
                  metric=metric, mode=mode, cpus=float(cpus), gpus=float(gpus),
                  max_failures=failures, cwd=os.getcwd(),
                  results=os.path.abspath(results) if results else None, at=tuple(at),
                  window=window)
    check_run_dirs(study)
    return study


def check_run_dirs(study: Study) -> None:
    """Two trials may not share a run directory: variants ``a`` and ``a_b`` with the
    scenarios ``b_c`` and ``c`` both name ``a_b_c_seed0``."""
    seen: Dict[str, Trial] = {}
    for trial in study.trials:
        other = seen.setdefault(trial.run_dir, trial)
        if other is not trial:
            raise ValueError(
                f"{study.path}: two trials share the run directory {trial.name}: "
                f"{_describe(other)} and {_describe(trial)}; rename a variant or a scenario")


def _describe(trial: Trial) -> str:
    scenario = f", scenario {trial.scenario}" if trial.scenario else ""
    return f"(variant {trial.variant}{scenario}, seed {trial.seed})"


__all__ = ["CATALOGUE", "Study", "Trial", "Variant", "catalogue", "check_run_dirs", "load_study"]
