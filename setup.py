from setuptools import find_packages, setup

# torch is not pinned here: scripts/install.sh picks the CPU or CUDA build first, so that
# pip never replaces an installed torch (and never pulls a CUDA build on a CPU machine).
install_requires = [
    "torch>=2.1",
    "torch-geometric>=2.5",
    "numpy>=1.24",
    "omegaconf>=2.3",
    "tensorboard>=2.12",
    "tqdm>=4.60",
]

# Optional back-ends get an extra when their code lands (see acegnn.envs.register_env).
extras_require = {
    "plot": ["matplotlib>=3.6"],
    "dev": ["pytest>=7", "pytest-xdist>=3", "matplotlib>=3.6"],
    # Figures, animations and the interactive HTML episode page (acegnn.viz).
    "viz": ["matplotlib>=3.6", "plotly>=5", "pillow"],
    # SMAX battles (JaxMARL's SMAC scenarios in JAX; runs on a CPU).
    "smax": ["jaxmarl==0.2.0"],
    # StarCraft II battles: the protocol messages. The game adapter also needs oxwhirl/smac,
    # installed from its repository (README); never the PyPI package `smac` (SMAC3).
    "sc2": ["s2clientprotocol>=5"],
    # Google Research Football: what its tasks import beside the engine; the engine itself
    # (gfootball, built from source) comes from `bash scripts/install_grf.sh`.
    "grf": ["psutil", "six"],
    # Studies on Ray Tune (`acegnn study`): a local Ray, or a cluster's.
    "ray": ["ray[tune]==2.60.0"],
}

setup(
    name="acegnn",
    version="0.1.0",
    description="ACE (bidirectional action-dependent Q-learning) as graph neural networks",
    long_description=open("README.md").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["acegnn", "acegnn.*"]),
    python_requires=">=3.9",
    install_requires=install_requires,
    extras_require=extras_require,
    entry_points={"console_scripts": ["acegnn=acegnn.cli:main"]},
)
