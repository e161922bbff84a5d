"""Plotly's basic bundle (issue "Light charts"): the pages load it when it is installed and
the plotly wheel's full bundle otherwise, through the finders, whitenoise and collectstatic;
scripts/install_plotly_basic.py installs only the pinned tarball, once."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client

from common.staticfinders import FULL_JS, FULL_STATIC_PATH, STATIC_PATH, PlotlyFinder, describe
from devstack.services import free_port
from scripts import install_plotly_basic as installer

from .conftest import login, wait_js

BASIC = b"/**\n* plotly.js (basic - minified) v3.7.0\n*/\nvar Plotly = {newPlot() {}};\n"


@pytest.fixture()
def basic(settings, tmp_path) -> Path:
    """A basic bundle installed where the settings look for it."""
    path = tmp_path / "vendor" / "plotly-basic.min.js"
    path.parent.mkdir()
    path.write_bytes(BASIC)
    settings.PLOTLY_BASIC_JS = path
    return path


@pytest.fixture()
def no_basic(settings, tmp_path) -> Path:
    """No basic bundle: an offline install."""
    settings.PLOTLY_BASIC_JS = tmp_path / "vendor" / "plotly-basic.min.js"
    return settings.PLOTLY_BASIC_JS


def _served(path: str) -> bytes:
    # A new Client builds new middleware: whitenoise reads the finders' files again.
    response = Client().get(f"/static/{path}")
    assert response.status_code == 200, path
    return b"".join(response.streaming_content) if response.streaming else response.content


def _full_sha256() -> str:
    return hashlib.sha256(FULL_JS.read_bytes()).hexdigest()


@pytest.mark.django_db
def test_pages_get_the_basic_bundle_when_it_is_installed(basic):
    assert PlotlyFinder().find(STATIC_PATH) == str(basic)
    assert _served(STATIC_PATH) == BASIC
    # A page drawing a trace type outside basic loads the full bundle under its own name.
    assert hashlib.sha256(_served(FULL_STATIC_PATH)).hexdigest() == _full_sha256()
    assert describe().startswith("Plotly basic bundle v3.7.0")


@pytest.mark.django_db
def test_pages_get_the_full_bundle_of_the_wheel_when_basic_is_not_installed(no_basic):
    assert PlotlyFinder().find(STATIC_PATH) == str(FULL_JS)
    assert PlotlyFinder().find(STATIC_PATH, find_all=True) == [str(FULL_JS)]
    assert hashlib.sha256(_served(STATIC_PATH)).hexdigest() == _full_sha256()
    assert "not installed" in describe() and "install_plotly_basic.py" in describe()


def test_the_finder_answers_nothing_for_other_paths(basic):
    finder = PlotlyFinder()
    assert finder.find("vendor/plotly-basic.min.js") == []
    assert finder.find("vendor/widgetbundle.js", find_all=True) == []


def test_collectstatic_follows_the_bundle_both_ways(settings, tmp_path, basic):
    """The collected plotly.min.js is the basic bundle while it is installed and the full one
    once it is gone, although the wheel's file is older than the copy collected before."""
    settings.STATICFILES_FINDERS = ["common.staticfinders.PlotlyFinder"]
    settings.STATIC_ROOT = tmp_path / "collected"
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    collected = tmp_path / "collected" / "vendor"
    call_command("collectstatic", interactive=False, verbosity=0)
    assert (collected / "plotly.min.js").read_bytes() == BASIC
    assert (collected / "plotly-full.min.js").stat().st_size == FULL_JS.stat().st_size

    basic.unlink()
    call_command("collectstatic", interactive=False, verbosity=0)
    copy = (collected / "plotly.min.js").read_bytes()
    assert hashlib.sha256(copy).hexdigest() == _full_sha256()


# --- scripts/install_plotly_basic.py -------------------------------------------------------


def _tarball(path: Path, members: dict[str, bytes]) -> Path:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    path.write_bytes(buffer.getvalue())
    return path


@pytest.fixture()
def fake(tmp_path) -> Path:
    return _tarball(
        tmp_path / "fake.tgz",
        {"package/plotly-basic.min.js": BASIC, "package/LICENSE": b"MIT\n", "package/x": b"x"},
    )


def _pin(monkeypatch, tarball: Path) -> None:
    """Make `tarball` the pinned one (the real pin names npm's 3.7.0 tarball)."""
    sha = hashlib.sha256(tarball.read_bytes()).hexdigest()
    monkeypatch.setattr(installer, "TARBALL_SHA256", sha)


def _unreachable() -> str:
    return f"http://127.0.0.1:{free_port()}/plotly.js-basic-dist-min-3.7.0.tgz"


def test_the_installer_refuses_a_tarball_whose_sha256_is_not_the_pinned_one(tmp_path, fake, capsys):
    dest = tmp_path / "vendor"
    assert installer.main(["--tarball", str(fake), "--dest", str(dest)]) == 1
    error = capsys.readouterr().err
    assert "sha256" in error and installer.TARBALL_SHA256 in error and "nothing installed" in error
    assert not dest.exists() or not any(dest.iterdir())


def test_a_refused_tarball_leaves_the_installed_bundle_alone(tmp_path, fake, monkeypatch):
    dest = tmp_path / "vendor"
    pinned = installer.TARBALL_SHA256
    _pin(monkeypatch, fake)
    assert installer.main(["--tarball", str(fake), "--dest", str(dest)]) == 0
    before = {p.name: p.read_bytes() for p in dest.iterdir()}
    monkeypatch.setattr(installer, "TARBALL_SHA256", pinned)
    assert installer.main(["--tarball", str(fake), "--dest", str(dest), "--force"]) == 1
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == before


def test_the_installer_installs_the_pinned_tarball_once(tmp_path, fake, monkeypatch, capsys):
    dest = tmp_path / "vendor"
    _pin(monkeypatch, fake)
    assert installer.main(["--tarball", str(fake), "--dest", str(dest)]) == 0
    assert (dest / "plotly-basic.min.js").read_bytes() == BASIC
    assert (dest / "plotly-basic.LICENSE").read_bytes() == b"MIT\n"
    assert sorted(p.name for p in dest.iterdir()) == [
        "plotly-basic.LICENSE",
        "plotly-basic.json",
        "plotly-basic.min.js",
    ]
    stamp = json.loads((dest / "plotly-basic.json").read_text())
    assert stamp["version"] == "3.7.0" and stamp["sha256"] == hashlib.sha256(BASIC).hexdigest()
    capsys.readouterr()
    # Installed: nothing is fetched (the URL answers nothing) and nothing changes.
    assert installer.main(["--url", _unreachable(), "--dest", str(dest)]) == 0
    assert "ready" in capsys.readouterr().out
    # A damaged bundle is installed again.
    (dest / "plotly-basic.min.js").write_bytes(BASIC[:20])
    assert installer.main(["--url", _unreachable(), "--dest", str(dest)]) == 1
    assert installer.main(["--tarball", str(fake), "--dest", str(dest)]) == 0
    assert (dest / "plotly-basic.min.js").read_bytes() == BASIC


def test_the_installer_refuses_a_pinned_tarball_without_the_bundle(tmp_path, monkeypatch, capsys):
    tarball = _tarball(tmp_path / "empty.tgz", {"package/../../plotly-basic.min.js": BASIC})
    _pin(monkeypatch, tarball)
    assert installer.main(["--tarball", str(tarball), "--dest", str(tmp_path / "vendor")]) == 1
    assert "no package/plotly-basic.min.js" in capsys.readouterr().err
    assert not (tmp_path / "plotly-basic.min.js").exists()


def test_offline_the_installer_says_the_full_bundle_is_served(tmp_path, capsys):
    dest = tmp_path / "vendor"
    # make run, make test and the image build go on (--offline-ok)...
    assert installer.main(["--url", _unreachable(), "--dest", str(dest), "--offline-ok"]) == 0
    assert "full Plotly bundle" in capsys.readouterr().err
    # ...a plain run fails; neither installs anything.
    assert installer.main(["--url", _unreachable(), "--dest", str(dest)]) == 1
    assert not (dest / "plotly-basic.min.js").exists()


# --- in a real browser -------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_server_page_draws_its_charts_with_the_bundle_installed_here(
    browser, web_server, triton, admin_credentials, settings
):
    """make test installs the basic bundle first (offline: the full one is served, and
    this checks that instead); the Daphne under test reads the same PLOTLY_BASIC_JS."""
    basic = Path(settings.PLOTLY_BASIC_JS).is_file()
    page = browser.new_page()
    errors: list[str] = []  # as the other browser tests: uncaught errors in the page
    page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
    login(page, web_server.url, *admin_credentials)
    page.goto(f"{web_server.url}/server/")
    wait_js(page, "!!document.querySelector('#chart-rps .main-svg')")
    traces = page.evaluate("Object.keys(Plotly.PlotSchema.get().traces).sort()")
    if basic:
        assert traces == ["bar", "pie", "scatter"]
    else:
        assert {"bar", "scatter", "heatmap", "box"} <= set(traces)
    assert page.evaluate("document.getElementById('chart-rps').layout.xaxis.type") == "date"
    assert not errors, errors
