"""The tokenizer is lossless and keeps comments, literals and header names whole."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.hipify import HipifyError
from ember.hipify.tokenizer import CHAR, COMMENT, HEADER, IDENT, STRING, tokenize

_PIECES = st.sampled_from(
    [
        "cudaMalloc",
        " ",
        "\t",
        "\n",
        "\r\n",
        "// c cudaFree\n",
        "/* x\n y */",
        '"str \\" cuda"',
        "'c'",
        'u8"s"',
        'R"d(raw "cuda" )d"',
        "#include <cuda.h>\n",
        "#define X(a) cudaFree(a)\n",
        "<<<",
        ">>>",
        "0x1f",
        "1'000",
        "a->b",
        "::",
        "\\\n",
        "é",
        "@",
        "{",
        "}",
        "(",
        ")",
        ";",
        "x",
        "3.5e+2f",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=40))
def test_roundtrip_is_exact(pieces: list[str]) -> None:
    src = "".join(pieces)
    assert "".join(t.text for t in tokenize(src)) == src


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_characters="*"), max_size=200))
def test_roundtrip_arbitrary_text_without_block_comments(src: str) -> None:
    assert "".join(t.text for t in tokenize(src)) == src


def kinds(src: str) -> list[tuple[str, str]]:
    return [(t.kind, t.text) for t in tokenize(src) if t.kind not in ("ws", "nl")]


def test_comments_and_literals_are_single_tokens() -> None:
    toks = kinds('x = "cudaMalloc"; // cudaFree\n/* cudaMemcpy */ c = \'"\';')
    assert (STRING, '"cudaMalloc"') in toks
    assert (COMMENT, "// cudaFree") in toks
    assert (COMMENT, "/* cudaMemcpy */") in toks
    assert (CHAR, "'\"'") in toks
    assert [text for kind, text in toks if kind == IDENT] == ["x", "c"]


def test_raw_string_with_quotes_and_parens() -> None:
    src = 'auto s = R"xy(cudaMalloc ")" )xy"; cudaFree(p);'
    toks = kinds(src)
    assert (STRING, 'R"xy(cudaMalloc ")" )xy"') in toks
    assert (IDENT, "cudaFree") in toks


def test_include_header_names() -> None:
    toks = kinds(
        '#include <cuda_runtime.h>\n#  include "cublas_v2.h"\n#if __has_include(<cub/cub.cuh>)\n#endif\n'
    )
    assert (HEADER, "<cuda_runtime.h>") in toks
    assert (STRING, '"cublas_v2.h"') in toks
    assert (HEADER, "<cub/cub.cuh>") in toks


def test_line_numbers_and_crlf() -> None:
    toks = tokenize("a\r\nb\rc\nd")
    assert [t.line for t in toks if t.kind == IDENT] == [1, 2, 3, 4]


def test_spliced_line_comment_continues() -> None:
    toks = kinds("// first \\\ncudaMalloc still comment\nx")
    assert toks[0][0] == COMMENT and "still" in toks[0][1]
    assert toks[-1] == (IDENT, "x")


def test_unterminated_block_comment_is_an_error() -> None:
    with pytest.raises(HipifyError, match=r"k\.cu:2: unterminated /\* comment"):
        tokenize("int x;\n/* never closed\ncudaMalloc", "k.cu")


def test_unterminated_raw_string_is_an_error() -> None:
    with pytest.raises(HipifyError, match="unterminated raw string"):
        tokenize('auto s = R"(abc', "k.cu")


def test_apostrophe_in_error_directive_is_tolerated() -> None:
    src = "#error this doesn't work\ncudaFree(p);\n"
    assert (IDENT, "cudaFree") in kinds(src)
