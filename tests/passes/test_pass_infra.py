"""The pass infrastructure (ember.transform): Sequential, PassContext, timing, dumps, instruments."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

import ember
from ember import te
from ember.errors import EmberError, LoweringError, PassError
from ember.transform import Pass, PassContext, PassInstrument, Sequential, known_pass_names


class Append(Pass):
    """Appends its tag to a list (a new list: the input is not changed)."""

    name = "Append"
    contract = "needs a list; gives it with the tag appended"

    def __init__(self, tag: str) -> None:
        self.tag = tag

    def transform(self, ir: Any, ctx: PassContext) -> Any:
        return [*ir, self.tag]


class AppendO2(Append):
    name = "AppendO2"
    opt_level = 2


class AppendO3(Append):
    name = "AppendO3"
    opt_level = 3


class MustRun(Append):
    name = "MustRun"
    required = True


class Fails(Pass):
    name = "Fails"
    contract = "always raises a LoweringError"

    def transform(self, ir: Any, ctx: PassContext) -> Any:
        raise LoweringError("the pass failed on purpose")


def test_sequential_runs_in_order_and_leaves_input_alone() -> None:
    seq = Sequential([Append("a"), Append("b"), Sequential([Append("c"), Append("d")], name="Inner")], name="Outer")
    start: list[str] = []
    assert seq(start) == ["a", "b", "c", "d"]
    assert start == []
    assert seq.names() == ["Outer", "Append", "Append", "Inner", "Append", "Append"]


def test_opt_level_gates_passes() -> None:
    seq = Sequential([Append("a"), AppendO2("b"), AppendO3("c"), MustRun("r")], name="Gated")
    assert seq([]) == ["a", "b", "r"]  # the default context has opt_level 2
    with PassContext(opt_level=3):
        assert seq([]) == ["a", "b", "c", "r"]
    with PassContext(opt_level=0) as ctx:
        assert seq([]) == ["a", "r"]  # a required pass runs at every level
    assert ctx.skipped == ["AppendO2", "AppendO3"]
    with PassContext(opt_level=0):
        assert Sequential([Append("x")], name="Late", opt_level=1)(["in"]) == ["in"]


def test_disabled_passes_are_skipped_by_name() -> None:
    seq = Sequential([Append("a"), AppendO2("b"), Sequential([Append("c")], name="Tail")], name="Dis")
    with PassContext(disabled_passes=["AppendO2"]):
        assert seq([]) == ["a", "c"]
    with PassContext(disabled_passes={"Tail"}):
        assert seq([]) == ["a", "b"]
    with PassContext(disabled_passes=["Append"]):
        assert seq([]) == ["b"]


def test_unknown_or_required_disabled_pass_is_a_clear_error() -> None:
    seq = Sequential([Append("a"), MustRun("r")], name="Checked")
    with PassContext(disabled_passes=["PartitionLoop"]), pytest.raises(PassError) as err:
        seq([])
    msg = str(err.value)
    assert "PartitionLoop" in msg and "known passes" in msg and "PartitionLoops" in msg and "InferAndFold" in msg
    with PassContext(disabled_passes=["MustRun"]), pytest.raises(PassError, match="MustRun cannot be disabled"):
        seq([])
    # a name known from elsewhere (a loop pass) is fine in a context that runs other passes
    with PassContext(disabled_passes=["PartitionLoops"]):
        assert seq([]) == ["a", "r"]
    assert {"FlattenStorage", "Simplify", "GraphSimplify", "Fuse", "Checked"} <= set(known_pass_names())


def test_nested_contexts_innermost_wins_and_unwind() -> None:
    default = PassContext.current()
    with PassContext(opt_level=1) as outer:
        assert PassContext.current() is outer
        with PassContext(opt_level=3, disabled_passes=["Append"]) as inner:
            assert PassContext.current() is inner
            assert Sequential([Append("a"), AppendO3("b")], name="N1")([]) == ["b"]
        assert PassContext.current() is outer
        assert Sequential([Append("a"), AppendO3("b")], name="N2")([]) == ["a"]
    assert PassContext.current() is default
    assert default.opt_level == 2 and not default.disabled_passes and default.dump_dir is None


def test_context_is_thread_local() -> None:
    seen: dict[str, Any] = {}

    def worker() -> None:
        ctx = PassContext.current()
        seen["ctx"] = ctx
        seen["result"] = Sequential([Append("a"), AppendO3("b")], name="T")([])

    with PassContext(opt_level=3, disabled_passes=["Append"]) as mine:
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        assert PassContext.current() is mine
    assert seen["ctx"] is not mine
    assert seen["ctx"].opt_level == 2 and not seen["ctx"].disabled_passes
    assert seen["result"] == ["a"]


def test_timing_records_every_pass_run() -> None:
    seq = Sequential([Append("a"), AppendO2("b"), Append("c"), AppendO3("skipped")], name="Timed")
    with PassContext(timing=True) as ctx:
        seq([])
    assert [name for name, _ in ctx.timings] == ["Append", "AppendO2", "Append"]
    assert all(isinstance(sec, float) and sec >= 0 for _, sec in ctx.timings)
    table = ctx.summary().splitlines()
    assert table[0].split() == ["pass", "runs", "seconds", "share"]
    rows = {line.split()[0]: line.split() for line in table[1:]}
    assert rows["Append"][1] == "2" and rows["AppendO2"][1] == "1" and rows["total"][1] == "3"
    assert "AppendO3" not in rows
    with PassContext() as quiet:
        seq([])
    assert quiet.timings == [] and "timing=True" in quiet.summary()


def test_dump_dir_writes_ir_after_every_pass_in_order(tmp_path) -> None:
    d = tmp_path / "dumps" / "nested"
    seq = Sequential([Append("a"), AppendO3("skipped"), Append("b")], name="Dumped")
    with PassContext(dump_dir=d) as ctx:
        seq([])
        seq(["again"])
    files = sorted(p.name for p in d.iterdir())
    assert files == ["001_Append.txt", "002_Append.txt", "003_Append.txt", "004_Append.txt"]
    assert [p.name for p in ctx.dumps] == files
    assert (d / "001_Append.txt").read_text() == "['a']\n"
    assert (d / "002_Append.txt").read_text() == "['a', 'b']\n"
    assert (d / "004_Append.txt").read_text() == "['again', 'a', 'b']\n"


def test_dump_of_lowering_holds_each_pass_ir_text(tmp_path, rng, kernel) -> None:
    A = te.placeholder((29, 13), "float32", name="A")
    B = te.compute((29, 13), lambda i, j: A[i, j] * 3.0 - 1.0, name="B")
    s = te.create_schedule(B.op)
    _, ji = s[B].split(B.op.axis[1], 4)
    s[B].vectorize(ji)
    with PassContext(dump_dir=tmp_path, timing=True) as ctx:
        f = ember.lower(s, [A, B], name="scale")
    names = [p.name for p in sorted(tmp_path.iterdir())]
    assert names == [
        "001_ScheduleToStmt.txt",
        "002_FlattenStorage.txt",
        "003_Simplify.txt",
        "004_PartitionLoops.txt",
        "005_Simplify.txt",
        "006_UnrollLoops.txt",
        "007_VectorizeLoops.txt",
        "008_PipelineSharedCopies.txt",
        "009_Simplify.txt",
    ]
    first = (tmp_path / "001_ScheduleToStmt.txt").read_text()
    assert "B[" in first and "ramp" not in first  # tensor-level, not yet vectorized
    assert "ramp" in (tmp_path / "007_VectorizeLoops.txt").read_text()
    assert (tmp_path / "009_Simplify.txt").read_text() == str(f.body) + "\n"
    assert len(ctx.timings) == 9
    mod = ember.build(f, target="llvm")
    a = rng.standard_normal((29, 13)).astype(np.float32)
    b = ember.nd.array(np.full((29, 13), np.nan, np.float32))
    mod(ember.nd.array(a), b)
    a64 = a.astype(np.float64)
    kernel.assert_fp(b.numpy(), a64 * 3.0 - 1.0, np.abs(a64 * 3.0) + 1.0)


def test_instruments_see_every_pass_that_runs() -> None:
    events: list[tuple[str, str, Any]] = []

    class Recorder(PassInstrument):
        def before_pass(self, p: Pass, ir: Any) -> None:
            events.append(("before", p.name, list(ir)))

        def after_pass(self, p: Pass, ir: Any) -> None:
            events.append(("after", p.name, list(ir)))

    with PassContext(instruments=[Recorder()]):
        Sequential([Append("a"), AppendO3("no"), AppendO2("b")], name="Instr")([])
    assert events == [
        ("before", "Append", []),
        ("after", "Append", ["a"]),
        ("before", "AppendO2", ["a"]),
        ("after", "AppendO2", ["a", "b"]),
    ]


def test_ember_error_of_a_pass_propagates_unchanged(tmp_path) -> None:
    with PassContext(dump_dir=tmp_path, timing=True) as ctx, pytest.raises(LoweringError, match="on purpose"):
        Sequential([Append("a"), Fails(), Append("b")], name="Broken")([])
    assert [p.name for p in tmp_path.iterdir()] == ["001_Append.txt"]
    assert [n for n, _ in ctx.timings] == ["Append"]


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"opt_level": 4}, "opt_level must be an int from 0 to 3"),
        ({"opt_level": -1}, "opt_level must be an int from 0 to 3"),
        ({"opt_level": True}, "opt_level must be an int from 0 to 3"),
        ({"opt_level": "2"}, "opt_level must be an int from 0 to 3"),
        ({"disabled_passes": "PartitionLoops"}, "not a single string"),
        ({"disabled_passes": 3}, "must be a list of pass names"),
        ({"disabled_passes": ["Simplify", 7]}, "every item must be a pass name"),
        ({"dump_dir": 5}, "dump_dir must be a path"),
        ({"dump_dir": "  "}, "dump_dir is empty"),
        ({"timing": "yes"}, "timing must be True or False"),
        ({"instruments": [print]}, "not a PassInstrument"),
    ],
)
def test_bad_context_arguments_raise_pass_error(kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(PassError, match=needle) as err:
        PassContext(**kwargs)
    assert isinstance(err.value, EmberError)


def test_bad_sequential_and_pass_definitions_raise_pass_error() -> None:
    with pytest.raises(PassError, match="give a list of passes"):
        Sequential(Append("a"))  # type: ignore[arg-type]
    with pytest.raises(PassError, match="item 1 is"):
        Sequential([Append("a"), "Simplify"])  # type: ignore[list-item]
    with pytest.raises(PassError, match="has no contract"):

        class NoContract(Pass):  # noqa: F841 - defining it is the test
            name = "NoContract"

            def transform(self, ir: Any, ctx: PassContext) -> Any:
                return ir


def test_dump_into_a_file_path_is_a_pass_error(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with PassContext(dump_dir=blocker), pytest.raises(PassError, match="cannot write the IR dump of pass Append"):
        Append("a")([])
