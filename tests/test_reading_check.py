"""scripts/reading_check.py (issue 63's reading check): the criteria met today stay met, and each criterion
catches what it is about, on a small tree written here."""
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import reading_check  # noqa: E402

MET = ("training_step", "_batches_that_stepped", "log_metrics", "test-injection")


def test_the_criteria_met_today_stay_met():
    findings = {f.criterion: f for f in reading_check.check()}
    assert len(findings) == 7
    for key in MET:
        [f] = [f for c, f in findings.items() if key in c]
        assert f.ok, (f.criterion, f.measured)


def _tree(tmp: Path, epoch: str, module: str, callback: str = "") -> Path:
    (tmp / "genenv_pl").mkdir()
    (tmp / "callbacks").mkdir()
    (tmp / "genenv_pl" / "epoch.py").write_text(epoch)
    (tmp / "genenv_pl" / "module.py").write_text(module)
    (tmp / "callbacks" / "cb.py").write_text(callback)
    return tmp


def test_each_criterion_catches_its_pattern(tmp_path):
    epoch = ("def run_epoch(env, cfg, generate=None):\n    '''doc'''\n    if cfg.variant == 'static':\n        pass\n"
             + "    x = 1\n" * 50)
    module = ("class M:\n    def training_step(self, batch):\n        self.trainer.datamodule.step_done()\n"
              "        step = self.trainer.fit_loop.epoch_loop._batches_that_stepped\n"
              "        RankSync(self.trainer); RankSync(self.trainer); RankSync(1); RankSync(2); RankSync(3); RankSync(4); "
              "RankSync(5)\n")
    callback = "def patch(logger):\n    logger.log_metrics = print\n"
    findings = reading_check.check(_tree(tmp_path, epoch, module, callback))
    measured = {f.criterion: f.measured for f in findings}
    assert [f.ok for f in findings] == [False, True, False, False, False, False, False], measured
    assert [f.measured for f in findings] == [
        "52 lines, 1 cfg.variant", "3 lines, 0 cfg.variant", "1 reads", "genenv_pl/module.py", "callbacks/cb.py",
        "genenv_pl/epoch.py:run_epoch(generate)", "7 times"]
