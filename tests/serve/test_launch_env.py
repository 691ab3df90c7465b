"""Serving runs Ray Serve's throughput-optimized mode by default: ``launch.start`` puts it in
the environment before it starts Ray (whose processes inherit it), never over a value the
operator set, and not when it joins an existing cluster or the setting is off."""

from __future__ import annotations

import pytest

from quarry.serve import launch
from quarry.serve.settings import AuthSettings, ServeSettings

pytestmark = [pytest.mark.unit]

KEYS = launch.THROUGHPUT_KEYS


class _Stop(Exception):
    pass


def _env_when_ray_starts(monkeypatch, tmp_path, address=None, **kw) -> dict[str, str | None]:
    """Run ``launch.start`` up to ``ray.init`` and return the Serve variables at that moment."""
    import os

    import ray

    seen: dict[str, str | None] = {}

    def fake_init(**_):
        seen.update({k: os.environ.get(k) for k in KEYS})
        raise _Stop

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", fake_init)
    settings = ServeSettings(index_root=str(tmp_path), auth=AuthSettings(hs256_secret="s" * 40), **kw)
    with pytest.raises(_Stop):
        launch.start(settings, address=address)
    return seen


def _unset(monkeypatch) -> None:
    for k in KEYS:  # setenv first, so monkeypatch restores the original state (set or not) afterwards
        monkeypatch.setenv(k, "")
        monkeypatch.delenv(k)


@pytest.fixture
def clean_env(monkeypatch):
    _unset(monkeypatch)


def test_start_sets_the_throughput_optimized_mode_by_default(monkeypatch, tmp_path, clean_env):
    assert ServeSettings.model_fields["throughput_optimized"].default is True
    assert _env_when_ray_starts(monkeypatch, tmp_path) == {
        "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1", "RAY_SERVE_ENABLE_DIRECT_INGRESS": "1",
        "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "2"}
    _unset(monkeypatch)
    assert _env_when_ray_starts(monkeypatch, tmp_path, direct_ingress=False, direct_ingress_drain_s=0.5) == {
        "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1", "RAY_SERVE_ENABLE_DIRECT_INGRESS": "0",
        "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "0.5"}


def test_an_operator_value_wins_and_off_or_a_cluster_leaves_the_environment_alone(monkeypatch, tmp_path,
                                                                                   clean_env):
    monkeypatch.setenv("RAY_SERVE_THROUGHPUT_OPTIMIZED", "0")
    assert _env_when_ray_starts(monkeypatch, tmp_path)["RAY_SERVE_THROUGHPUT_OPTIMIZED"] == "0"
    _unset(monkeypatch)
    assert set(_env_when_ray_starts(monkeypatch, tmp_path, throughput_optimized=False).values()) == {None}
    assert set(_env_when_ray_starts(monkeypatch, tmp_path, address="auto").values()) == {None}
