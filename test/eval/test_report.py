"""memnav.eval.report's figure writing, which the eval-bag report, eval-report and the training curves share."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from memnav.eval.report import figure_png, save_figure  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_a_figure_becomes_png_bytes_and_is_closed():
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1], [1, 0])
    png = figure_png(fig, dpi=50)
    assert png.startswith(PNG_MAGIC) and len(png) > 500
    assert not plt.fignum_exists(fig.number)


def test_a_saved_figure_replaces_the_file_whole(tmp_path):
    path = tmp_path / "plot.png"
    path.write_bytes(b"an older plot")
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1], [0, 1])
    save_figure(fig, path, dpi=50)
    assert path.read_bytes().startswith(PNG_MAGIC)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plot.png"]
    assert not plt.fignum_exists(fig.number)


def test_the_within_radius_band_is_strictly_within_as_the_metrics_count_it():
    """The stop plot's 'within radius' band and the metrics' frames_at_goal (strictly within success_distance_m, as
    live success) agree for a frame exactly on the radius."""
    import numpy as np

    from memnav.core.memory.scene_graph import InsertKind
    from memnav.core.types import Pose2D
    from memnav.eval.eval_bag import EvalResult, FrameRecord, Goal
    from memnav.eval.report import _at_goal

    goal = Goal(0, np.zeros((4, 4, 3), np.uint8), None, Pose2D(0.0, 0.0, 0.0))
    frames = [FrameRecord(10 + i, Pose2D(x, 0.0, 0.0), Pose2D(x, 0.0, 0.0), InsertKind.NEW_PLACE, 0, goal_index=0)
              for i, x in enumerate((0.5, 1.0, 1.5))]
    result = EvalResult({"stop": {"success_distance_m": 1.0}}, frames, [goal], {}, [], [], [])
    assert _at_goal(result, frames).tolist() == [True, False, False]
