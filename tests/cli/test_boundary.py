"""The CLI's one error boundary: a file's early end or damage is an input error (exit 2), Ctrl-C stays an
interrupt (130), and neither prints a traceback."""

from __future__ import annotations

import gzip
import zipfile
import zlib

import pytest
import typer

from deployc.cli import app as cli_app


def _app_raising(exc: BaseException) -> typer.Typer:
    """A one-command app whose command raises `exc`, run by click as deployc's commands are."""
    app = typer.Typer()

    @app.command()
    def boom() -> None:
        raise exc

    @app.command()
    def other() -> None:  # two commands: click dispatches by name, as deployc's app does
        pass

    return app


@pytest.mark.parametrize("exc", [EOFError("Compressed file ended before the end-of-stream marker was reached"),
                                 zlib.error("Error -3 while decompressing data: invalid distance too far back"),
                                 gzip.BadGzipFile("CRC check failed"), zipfile.BadZipFile("Bad CRC-32")],
                         ids=["eof", "zlib", "gzip", "zip"])
def test_a_damaged_stream_is_an_input_error_not_an_interrupt(exc: BaseException, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(cli_app, "app", _app_raising(exc))
    assert cli_app.main(["boom"]) == 2
    err = capsys.readouterr().err
    assert f"error: a file is truncated or damaged ({type(exc).__name__}: {exc})" in err
    assert "interrupted" not in err and "Traceback" not in err


def test_ctrl_c_is_still_an_interrupt(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(cli_app, "app", _app_raising(KeyboardInterrupt()))
    assert cli_app.main(["boom"]) == 130
    err = capsys.readouterr().err
    assert "damaged" not in err and "Traceback" not in err
