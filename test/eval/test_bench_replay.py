"""`memnav bench replay`: Ctrl-C keeps the bag evaluated before it (its keys: test_eval_bag.test_bench_replay_keys)."""
import json

import pytest

from memnav.cli import main


@pytest.mark.slow
def test_ctrl_c_during_the_annotated_bag_keeps_the_plain_bags_figures(tmp_path, monkeypatch, capsys):
    from memnav.eval import eval_bag

    evaluate_bag, calls = eval_bag.evaluate_bag, []

    def evaluate_until_ctrl_c(*args, **kwargs):
        calls.append(args[0].name)
        if len(calls) == 3:   # the warm-up, the plain bag, then Ctrl-C in the annotated one
            raise KeyboardInterrupt
        return evaluate_bag(*args, **kwargs)

    monkeypatch.setattr(eval_bag, "evaluate_bag", evaluate_until_ctrl_c)
    out = tmp_path / "replay.json"
    assert main(["bench", "replay", "--data", str(tmp_path / "no_data"), "--seconds", "2", "--repeats", "1",
                 "--json", str(out)]) == 130
    printed = capsys.readouterr()
    assert calls == ["annotated", "rgbd_odom", "annotated"]
    res = json.loads(out.read_text())
    assert json.loads(printed.out) == res and res["interrupted"] is True and res["left_out"] == ["annotated bag"]
    assert res["realtime_factor"] > 0 and res["frames"] == 21 and res["targets"] == {"realtime_factor": 20}
    assert "realtime_factor_annotated" not in res and "annotated_metrics" not in res
    assert "memnav bench replay: interrupted: measured rgbd_odom bag; left out: annotated bag" in printed.err
