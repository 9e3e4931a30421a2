"""The one report writer every benchmark uses."""

from asymspec_agents.bench import common


def test_write_report_writes_markdown_then_plots(tmp_path):
    calls = []
    path = tmp_path / "deeper" / "report.md"
    common.write_report(path, "| a |\n", lambda: calls.append(path.read_text()))
    assert path.read_text() == "| a |\n"
    assert calls == ["| a |\n"]  # the plot runs after the markdown is on disk


def test_write_report_without_matplotlib_skips_plots(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "pyplot", lambda optional=False: None)
    calls = []
    common.write_report(tmp_path / "r.md", "text", lambda: calls.append(1))
    assert (tmp_path / "r.md").read_text() == "text" and calls == []


def test_write_report_without_plot(tmp_path):
    common.write_report(str(tmp_path / "r.md"), "text")
    assert (tmp_path / "r.md").read_text() == "text"


def test_terminal_tables_align_labels_left_and_numbers_right():
    from asymspec_agents.bench.common import terminal_table

    table = terminal_table(["name", "kind", "s"], [["alpha", "x", "1.50"], ["b", "longer", "12.25"]], left=2)
    assert table.splitlines() == ["name  kind       s",
                                  "alpha x       1.50",
                                  "b     longer 12.25"]
