"""Maps the top-level code folders into the one `graphsim` namespace (DESIGN §3).

`importers/`, `passes/`, `costing/`, `work/` and `profiles/` sit beside `graphsim/` in the
repository so the tree shows the architecture; installed, they are `graphsim.importers` etc.
"""
from setuptools import find_packages, setup

FOLDERS = {
    "graphsim": "graphsim",
    "importers": "graphsim.importers",
    "passes": "graphsim.passes",
    "costing": "graphsim.costing",
    "work": "graphsim.work",
    "profiles": "graphsim.profiles",
    "serving": "graphsim.serving",
}

packages: list[str] = []
package_dir: dict[str, str] = {}
for folder, name in FOLDERS.items():
    package_dir[name] = folder
    packages.append(name)
    packages.extend(f"{name}.{sub}" for sub in find_packages(folder))

setup(packages=packages, package_dir=package_dir)
