"""Resuming from a damaged newest checkpoint: every kind of damage is found before anything is restored,
and the run resumes from the older good checkpoint as if the damaged one were not there."""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from speedtronic.errors import SpeedtronicWarning
from speedtronic.profiling import MetricLogger
from speedtronic.training.config import ConfigError
from speedtronic.training.task import SuccessorTask, successor_model
from speedtronic.training.trainer import Trainer

STEP_4, STEP_8 = "step_00000004.pt", "step_00000008.pt"


def make_trainer(checkpoints: Path, steps: int, *, resume: bool = False) -> Trainer:
    torch.manual_seed(0)
    model = successor_model(16, 16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return Trainer(
        model,
        optimizer,
        SuccessorTask(16, 8, 4, noise=0.0, seed=0),
        steps=steps,
        scheduler=torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (step + 1)),
        logger=MetricLogger(stream=io.StringIO()),
        device="cpu",
        checkpoint_dir=checkpoints,
        checkpoint_every=4,
        resume=resume,
    )


def resumed(checkpoints: Path) -> tuple[Trainer, list[str]]:
    """A trainer resumed from ``checkpoints`` and trained to step 10, and the warnings it gave."""
    trainer = make_trainer(checkpoints, 10, resume=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            trainer.fit()
        finally:
            trainer.logger.close()
    return trainer, [str(w.message) for w in caught if issubclass(w.category, SpeedtronicWarning)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Checkpoints at steps 4 and 8 of one run (copied by each test that damages them)."""
    checkpoints = tmp_path_factory.mktemp("trained") / "ckpt"
    trainer = make_trainer(checkpoints, 8)
    trainer.fit()
    trainer.logger.close()
    return checkpoints


@pytest.fixture(scope="module")
def from_step_4(trained: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    """The model a run resumed from step 4 (step 8 removed) has at step 10."""
    clean = tmp_path_factory.mktemp("clean") / "ckpt"
    clean.mkdir()
    (clean / STEP_4).write_bytes((trained / STEP_4).read_bytes())
    trainer, _ = resumed(clean)
    return {key: value.clone() for key, value in trainer.module.state_dict().items()}


def rewrite(change: Callable[[dict[str, Any]], Any]) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        state = torch.load(path, weights_only=True)
        torch.save(change(state) or state, path)

    return damage


def truncated(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def drop(state: dict[str, Any], *keys: str) -> None:
    for key in keys[:-1]:
        state = state[key]
    del state[keys[-1]]


DAMAGE: dict[str, Callable[[Path], None]] = {
    "truncated file": truncated,
    "not a dict": rewrite(lambda state: [state["step"]]),
    "a count of the wrong type": rewrite(lambda state: state.update(step="8")),
    "no generator in the data": rewrite(lambda state: drop(state, "data", "generator")),
    "a generator state of the wrong shape": rewrite(
        lambda state: state["data"].update(generator=torch.zeros(3, dtype=torch.uint8))
    ),
    "no betas in an optimizer group": rewrite(
        lambda state: drop(state["optimizer"]["param_groups"][0], "betas")
    ),
    "an optimizer lr of the wrong type": rewrite(
        lambda state: state["optimizer"]["param_groups"][0].update(lr="fast")
    ),
    "an optimizer buffer of the wrong shape": rewrite(
        lambda state: state["optimizer"]["state"][0].update(exp_avg=torch.zeros(2))
    ),
    "a model weight of the wrong shape": rewrite(
        lambda state: state["model"].update({next(iter(state["model"])): torch.zeros(2)})
    ),
    "a scheduler count of the wrong type": rewrite(lambda state: state["scheduler"].update(last_epoch="8")),
    "an rng of the wrong type": rewrite(lambda state: state["rng"].update(torch=[1, 2, 3])),
}


class TestDamagedNewestCheckpoint:
    @pytest.mark.parametrize("kind", DAMAGE)
    def test_resumes_from_the_older_good_one(
        self, kind: str, trained: Path, from_step_4: dict[str, torch.Tensor], tmp_path: Path
    ) -> None:
        """Each kind of damage in the newest checkpoint: no exception, a warning naming it, and the
        run resumes from step 4 exactly as if the damaged checkpoint were not there."""
        checkpoints = tmp_path / "ckpt"
        checkpoints.mkdir()
        for name in (STEP_4, STEP_8):
            (checkpoints / name).write_bytes((trained / name).read_bytes())
        DAMAGE[kind](checkpoints / STEP_8)

        trainer, told = resumed(checkpoints)
        assert trainer.resumed_from == checkpoints / STEP_4
        assert trainer.step == 10
        assert any(f"skipped checkpoint {checkpoints / STEP_8}: " in message for message in told), told
        model = trainer.module.state_dict()
        assert all(torch.equal(model[key], value) for key, value in from_step_4.items())

    def test_load_checkpoint_refuses_it_before_restoring_anything(
        self, trained: Path, tmp_path: Path
    ) -> None:
        """Trainer.load_checkpoint of a checkpoint whose data lacks its generator: ConfigError naming
        the file and the entry, and the trainer's model, optimizer and step untouched."""
        path = tmp_path / STEP_8
        path.write_bytes((trained / STEP_8).read_bytes())
        DAMAGE["no generator in the data"](path)
        fresh = make_trainer(tmp_path / "none", 10)
        before = {key: value.clone() for key, value in fresh.module.state_dict().items()}
        with pytest.raises(ConfigError, match=r"'data' has no 'generator' entry"):
            fresh.load_checkpoint(path)
        fresh.logger.close()
        assert fresh.step == 0
        assert not fresh.optimizer.state_dict()["state"]
        assert all(torch.equal(fresh.module.state_dict()[key], value) for key, value in before.items())

    def test_no_checkpoint_that_fits_stops_the_run(self, trained: Path, tmp_path: Path) -> None:
        """Every checkpoint of another model: ConfigError saying so, rather than training from scratch."""
        checkpoints = tmp_path / "ckpt"
        checkpoints.mkdir()
        for name in (STEP_4, STEP_8):
            (checkpoints / name).write_bytes((trained / name).read_bytes())
            DAMAGE["a model weight of the wrong shape"](checkpoints / name)
        refused = r"step_00000008\.pt: does not fit this model: .*no older checkpoint"
        with pytest.raises(ConfigError, match=refused):
            resumed(checkpoints)
