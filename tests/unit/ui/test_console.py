import io

from dejima.errors import SettingsError
from dejima.ui.console import plain_console, render_error


def test_error_rendering_is_exact() -> None:
    buffer = io.StringIO()
    error = SettingsError("/x/settings.toml: unknown key 'images.bsae'", context="line one\nline two",
                          hint="did you mean 'base'?")
    plain_console(buffer, width=120).print(render_error(error))
    assert buffer.getvalue() == (
        "dejima: error [invalid-settings]: /x/settings.toml: unknown key 'images.bsae'\n"
        "  │ line one\n"
        "  │ line two\n"
        "  hint: did you mean 'base'?\n"
    )


def test_references_must_be_kebab_case() -> None:
    import pytest

    with pytest.raises(ValueError):
        SettingsError("m", reference="Not_Kebab")
