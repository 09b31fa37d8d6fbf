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
