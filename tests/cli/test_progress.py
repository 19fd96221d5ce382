"""The compile progress bar (tqdm): shown after its delay, with totals; silenced by quiet()."""

from __future__ import annotations

import io

from ember.model.progress import Progress, is_quiet, quiet


def test_bar_shows_stages_and_counts() -> None:
    out = io.StringIO()
    p = Progress(delay=0.0, stream=out)
    p("folding Conv conv1")
    for k in range(4):
        p(f"lowering k{k}", k + 1, 4)
    p.done("compiled 4 kernels")
    text = out.getvalue()
    assert "ember: folding Conv conv1" in text and "4/4" in text and "ember: compiled 4 kernels" in text
    assert not p.shown


def test_nothing_before_the_delay_and_nothing_when_quiet() -> None:
    out = io.StringIO()
    p = Progress(delay=60.0, stream=out)
    p("lowering k0", 1, 3)
    p.done("compiled")
    assert out.getvalue() == ""
    with quiet():
        assert is_quiet()
        q = Progress(delay=0.0, stream=out)
        q("lowering k0", 1, 3)
        q.done("compiled")
    assert out.getvalue() == "" and not is_quiet()


def test_a_verbose_compile_shows_the_bar_unless_quiet(files, capsys) -> None:
    import ember

    ember.compile(str(files["mlp.onnx"]), verbose=True, use_cache=False)  # verbose: no delay
    err = capsys.readouterr().err
    assert "ember: lowering" in err and "3/3" in err and "compiled 3 kernels" in err
    with quiet():
        ember.compile(str(files["mlp.onnx"]), verbose=True, use_cache=False)
    assert "ember:" not in capsys.readouterr().err
