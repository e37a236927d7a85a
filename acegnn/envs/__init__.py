"""Tasks: the contract between environments and learners, and their registry.

Each environment is a subpackage of :mod:`acegnn.envs` and is registered here by the
path of its config dataclass, so that it is imported only when a config names it. A
config dataclass has a ``name`` field and ``make(seed) -> VecTask``.
"""
from typing import Optional, Tuple, Union

from acegnn.envs.base import (Episodes, EvalResult, ExactEvaluation, ObsSpec, Policy, Scene,
                              Transition, VecTask, first_episodes)
from acegnn.utils.registry import MissingBackend, Registry

#: ``env.name`` -> the task's config dataclass.
ENVS: Registry = Registry("env")


def register_env(name: str, config: Union[str, type], extra: Optional[str] = None,
                 requires: Tuple[str, ...] = (), replace: bool = False,
                 install: Optional[str] = None) -> None:
    """Make a task available to configs as ``env.name: <name>``.

    Args:
        name (str): The config name.
        config (type or str): The task's config dataclass (fields with defaults, a
            ``name`` field, ``make(seed)`` returning the :class:`VecTask`), or its
            ``"module:Class"`` path, imported when first used.
        extra (str, optional): The pip extra that installs the task's back-end.
        requires (tuple of str, optional): Modules the back-end needs; a config naming
            the task without them fails with the install command.
        replace (bool, optional): Replace an entry of the same name.
        install (str, optional): Install instructions for the error, where the extra
            alone does not install the back-end.
    """
    ENVS.register(name, config, extra=extra, requires=requires, replace=replace, install=install)


register_env("spiders_fly", "acegnn.envs.spiders_fly:SpidersFlyConfig")
register_env("smax", "acegnn.envs.smac.smax:SMAXConfig", extra="smax", requires=("jax", "jaxmarl"))
register_env("grf", "acegnn.envs.grf:GRFConfig", extra="grf", requires=("gfootball",),
             install="bash scripts/install_grf.sh (Debian packages, then gfootball from source)")
register_env("sc2", "acegnn.envs.smac.sc2:SC2Config", extra="sc2",
             requires=("s2clientprotocol", "smac.env"),
             install="pip install -e '.[sc2]' 'git+https://github.com/oxwhirl/smac.git' "
                     "and StarCraft II 4.10 with the SMAC maps (docs/sc2.md)")

__all__ = ["ENVS", "Episodes", "EvalResult", "ExactEvaluation", "MissingBackend", "ObsSpec",
           "Policy", "Scene", "Transition", "VecTask", "first_episodes", "register_env"]
