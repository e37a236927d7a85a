"""Experiment configuration: YAML + ``key=value`` overrides -> typed dataclasses.

OmegaConf is used here only; the rest of the package receives dataclasses. Each
component's config dataclass lives beside the component: ``env.name`` picks a task's
config from :data:`acegnn.envs.ENVS`, ``algo.name`` a learner from
:data:`acegnn.algos.LEARNERS`, whose ``config_class`` and ``model_class`` are the
``algo`` and ``model`` sections. This module is also where a checkpoint's config is
compared with the one a run is resumed with.
"""
from __future__ import annotations

import ast
import dataclasses
import inspect
import os
import textwrap
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from acegnn.algos import LEARNERS, ACEDQNConfig, TrainConfig
from acegnn.envs import ENVS
from acegnn.nn.ace import ModelConfig


@dataclass
class RunConfig:
    dir: str = "runs"
    """Parent directory of run directories."""
    name: Optional[str] = None
    """Run directory name (default: <env>_<algo>_seed<seed>_<time>)."""


@dataclass
class ExperimentConfig:
    seed: int = 0
    """Seed of the network initialisation, environments, exploration and replay."""
    env: Any = None
    """The task's config (``env.name`` picks it)."""
    algo: Any = field(default_factory=ACEDQNConfig)
    """The learner's config (``algo.name`` picks it)."""
    model: Any = field(default_factory=ModelConfig)
    """The learner's network config (its ``model_class``)."""
    train: TrainConfig = field(default_factory=TrainConfig)
    run: RunConfig = field(default_factory=RunConfig)


def _valid_keys(node: Any, prefix: str = "") -> list:
    keys = []
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if dataclasses.is_dataclass(value):
            keys += _valid_keys(value, f"{prefix}{f.name}.")
        else:
            keys.append(f"{prefix}{f.name}")
    return keys


def _defaults(raw: Any, backend: bool = True) -> ExperimentConfig:
    """The default experiment of the env and algo that ``raw`` names (the first
    registered of each when it names none); ``backend``: the env's back-end must be
    installed."""
    env = OmegaConf.select(raw, "env.name", default=None) or next(iter(ENVS))
    algo = OmegaConf.select(raw, "algo.name", default=None) or next(iter(LEARNERS))
    learner = LEARNERS.get(algo)
    return ExperimentConfig(env=ENVS.get(env, check=backend)(), algo=learner.config_class(),
                            model=learner.model_class())


def _structured(raw: Any, backend: bool = True) -> ExperimentConfig:
    """``raw`` through the dataclasses."""
    default = _defaults(raw, backend)
    try:
        cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(default), raw))
    except ValueError as e:  # a component's own check (__post_init__)
        raise ValueError(f"invalid config: {e}") from None
    except OmegaConfBaseException as e:
        msg = str(e).splitlines()[0]
        raise ValueError(f"invalid config: {msg}\nvalid keys: {', '.join(_valid_keys(default))}") from None
    learner = LEARNERS.get(cfg.algo.name)
    if cfg.train.compile and getattr(learner, "compiled_kernels", None) is False:
        raise ValueError(f"invalid config: {learner.no_compiled_kernels(cfg.algo.name)}")
    return cfg


def load_config(path: Optional[str] = None, overrides: Sequence[str] = (),
                backend: bool = True) -> ExperimentConfig:
    """Read a YAML file and ``key=value`` overrides into an :class:`ExperimentConfig`.

    Raises:
        ValueError: on an unknown key (the valid keys are listed), a value of the wrong
            type, or an unknown env/algo name.
        MissingBackend: (a ``ValueError``) when the env names a back-end that is not
            installed; the message names the extra to install.

    ``backend=False`` reads the config of a task whose back-end is not installed here
    (``scripts/bench_update.py --batch`` times a saved batch of it).
    """
    try:
        raw = OmegaConf.merge(read_config_file(path) if path else OmegaConf.create(),
                              OmegaConf.from_dotlist(list(overrides)))
    except OmegaConfBaseException as e:
        raise ValueError(f"cannot read the config: {e}") from None
    return _structured(raw, backend)


def read_config_file(path: str, _chain: Tuple[str, ...] = ()) -> DictConfig:
    """A config file as written, with the files it names under ``base:`` beneath it.

    ``base`` is a path (or a list of paths, merged in order) relative to the file. The
    file's keys override its base's. Where the file names another ``env.name`` or
    ``algo.name`` than its base, the base's keys of that section (and of ``model`` with
    ``algo``: the learner owns its network's config) that the new component does not
    have are left out; every other key is inherited.

    Raises:
        ValueError: a missing file (and whose base it is), a file that is its own base,
            a ``base`` that is not a path or a list of paths, an unreadable file.
    """
    where = f" (the base of {_chain[-1]})" if _chain else ""
    real = os.path.realpath(path)
    if real in _chain:
        raise ValueError("config files are each other's base: "
                         + " -> ".join(_chain[_chain.index(real):] + (real,)))
    try:
        raw = OmegaConf.load(path)
    except FileNotFoundError:
        raise ValueError(f"config file not found: {path}{where}") from None
    except Exception as e:  # YAML syntax, OmegaConf's own errors
        raise ValueError(f"cannot read the config file {path}{where}: {e}") from None
    if not isinstance(raw, DictConfig):
        raise ValueError(f"config file {path}{where} is not a mapping of keys to values")
    base = raw.pop("base", None)
    if base is None:
        return raw
    names = [base] if isinstance(base, str) else list(base) if isinstance(base, ListConfig) else None
    if not names or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{path}: base must be a config file's path or a list of them "
                         f"(got {base!r})")
    under = OmegaConf.create()
    for name in names:
        lower = read_config_file(os.path.join(os.path.dirname(path), name), _chain + (real,))
        under = OmegaConf.merge(_without_foreign_keys(under, lower), lower)
    return OmegaConf.merge(_without_foreign_keys(under, raw), raw)


def _without_foreign_keys(under: DictConfig, over: DictConfig) -> DictConfig:
    """``under`` less the keys of the sections whose component ``over`` changes (its
    ``env.name`` or ``algo.name``) that the new component's config does not have."""
    under = under.copy()
    new_env = OmegaConf.select(over, "env.name", default=None)
    if new_env is not None and new_env != OmegaConf.select(under, "env.name", default=None) \
            and new_env in ENVS:
        _keep(under, "env", ENVS.get(new_env, check=False))
    new_algo = OmegaConf.select(over, "algo.name", default=None)
    if new_algo is not None and new_algo != OmegaConf.select(under, "algo.name", default=None) \
            and new_algo in LEARNERS:
        learner = LEARNERS.get(new_algo)
        _keep(under, "algo", learner.config_class)
        _keep(under, "model", learner.model_class)
    return under


def _keep(node: DictConfig, section: str, cls: type) -> None:
    """Drop the keys of ``node[section]`` that dataclass ``cls`` has no field for."""
    if section not in node:
        return
    fields = {f.name for f in dataclasses.fields(cls)}
    for key in [k for k in node[section] if k not in fields]:
        del node[section][key]


def to_dict(cfg: ExperimentConfig) -> dict:
    return dataclasses.asdict(cfg)


def to_yaml(cfg: ExperimentConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def field_docs(cls: type) -> Dict[str, str]:
    """Each field's docstring (the string after the field in the class body), on one
    line, of a config dataclass and its bases."""
    docs: Dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body
        except (OSError, TypeError, IndexError):  # no source (e.g. made at run time)
            continue
        for node, after in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def describe(cfg: ExperimentConfig) -> str:
    """The resolved config as YAML, each key with its field's docstring as a comment."""
    lines: List[str] = []

    def walk(node: Any, indent: str) -> None:
        docs = field_docs(type(node))
        for f in dataclasses.fields(node):
            value = getattr(node, f.name)
            note = f"  # {docs[f.name]}" if f.name in docs else ""
            if dataclasses.is_dataclass(value):
                lines.append(f"{indent}{f.name}:{note}")
                walk(value, indent + "  ")
                continue
            text = OmegaConf.to_yaml(OmegaConf.create({f.name: value})).strip()
            first, *rest = text.splitlines()
            lines.append(f"{indent}{first}{note}")
            lines.extend(f"{indent}{line}" for line in rest)

    walk(cfg, "")
    return "\n".join(lines) + "\n"


def from_dict(d: dict) -> ExperimentConfig:
    """Rebuild a config saved with :func:`to_dict` (e.g. from a checkpoint)."""
    return _structured(OmegaConf.create(d))


#: Config keys that may differ between a run and its resumption: raising
#: ``total_samples`` (or dropping ``stop_on_success``) trains a finished run further,
#: exactly as a run started with the larger budget would have gone on; exact evaluations
#: only add columns to ``eval.csv``, drawn episodes only images to TensorBoard, and how
#: often a checkpoint is written, where the learner runs, compiled kernels, the compiled
#: optimiser and flushed denormals change nothing of what is learned but float rounding,
#: and the heap kept changes nothing.
RESUMABLE_KEYS = ("halt_after", "progress", "total_samples", "stop_on_success",
                  "exact_eval_every", "log_episode", "checkpoint_every", "max_minutes",
                  "device", "compile", "compile_optimizer", "flush_denormal", "keep_heap")


#: Environment keys that may differ too: where football's engines run (processes or Ray
#: actors, and Ray's address and CPUs per actor) plays the same games.
ENV_RESUMABLE_KEYS = ("backend", "ray_address", "ray_cpus")


def comparable(config: dict) -> dict:
    """The config without the keys a resumed run may change."""
    out = {k: v for k, v in config.items() if k not in ("train", "env")}
    out["train"] = {k: v for k, v in config.get("train", {}).items() if k not in RESUMABLE_KEYS}
    env = config.get("env")
    out["env"] = ({k: v for k, v in env.items() if k not in ENV_RESUMABLE_KEYS}
                  if isinstance(env, dict) else env)
    return out


def check_resumable(saved: dict, cfg: ExperimentConfig, source: str) -> None:
    """Refuse to resume a checkpoint (config ``saved``) with a config that differs in
    more than :data:`RESUMABLE_KEYS` and :data:`ENV_RESUMABLE_KEYS`. The saved config goes through the dataclasses, so
    keys added to the package since the run started get their defaults, which is what
    the run used."""
    if comparable(to_dict(from_dict(saved))) != comparable(to_dict(cfg)):
        raise ValueError(f"the checkpoint at {source} was made with a different config")
