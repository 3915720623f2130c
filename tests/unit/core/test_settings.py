import pytest

from dejima.core.settings import Settings, parse_settings, render_settings_reference
from dejima.errors import SettingsError

SOURCE = "/home/u/.config/dejima/settings.toml"


def error_of(text: str) -> SettingsError:
    with pytest.raises(SettingsError) as caught:
        parse_settings(text, SOURCE)
    return caught.value


def test_valid_settings_override_defaults() -> None:
    settings = parse_settings('[images]\nbase = "debian:trixie-slim"\n[session]\nstop_timeout = 2\n', SOURCE)
    assert settings.images.base == "debian:trixie-slim"
    assert settings.session.stop_timeout == 2.0
    assert settings.session.network == Settings().session.network


@pytest.mark.parametrize("text", ["", "   \n\n"])
def test_empty_file_is_an_error_not_defaults(text: str) -> None:
    exc = error_of(text)
    assert exc.message == f"{SOURCE}: the settings file is empty"
    assert exc.reference == "empty-settings"
    assert "delete the file" in (exc.hint or "")


def test_comment_only_file_is_an_error() -> None:
    assert "holds only comments" in error_of("# nothing here\n").message


def test_invalid_toml_names_file_and_line() -> None:
    exc = error_of("[images\nbase = 1\n")
    assert exc.message.startswith(f"{SOURCE}:1:8: not valid TOML:")
    assert "close the [table] name with ]" in (exc.hint or "")


def test_unknown_key_suggests_the_close_one() -> None:
    exc = error_of('[images]\nbsae = "x"\n')
    assert exc.message == f"{SOURCE}: 'images.bsae' is not a known key"
    assert "did you mean 'base'? known keys in [images]: base, base_fallback" in (exc.hint or "")


def test_unknown_section() -> None:
    exc = error_of('[imagez]\nbase = "x"\n')
    assert exc.message == f"{SOURCE}: 'imagez' is not a known key"
    assert "did you mean 'images'?" in (exc.hint or "")


def test_top_level_key_must_be_a_table() -> None:
    assert error_of('images = "x"\n').message == f"{SOURCE}: 'images' must be a table, written [images], not str 'x'"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[images]\nbase = 3\n", "'images.base' must be a string, not int 3"),
        ("[session]\nstop_timeout = \"5\"\n", "'session.stop_timeout' must be a number, not str '5'"),
        ("[session]\nstop_timeout = true\n", "'session.stop_timeout' must be a number, not bool True"),
        ("[images]\nbase_fallback = \"pull\"\n",
         "'images.base_fallback' must be one of 'debootstrap', 'none', not 'pull'"),
        ("[images]\nbootstrap_mirror = \"ftp://x\"\n", "'images.bootstrap_mirror' must be an http:// or https:// URL"),
        ("[images]\nextra_ca_dir = \"certs\"\n", "'images.extra_ca_dir' must be an absolute path"),
        ("[session]\nready_timeout = 0\n",
         "'session.ready_timeout' must be a number of seconds between 0 and 3600, not 0"),
        ("[images]\nbase = \" \"\n", "'images.base' must not be empty"),
        ("[session]\nprotect_git_hooks = 1\n", "'session.protect_git_hooks' must be true or false, not int 1"),
        ("[limits]\nsession_pids = \"64\"\n", "'limits.session_pids' must be a whole number, not str '64'"),
        ("[limits]\nsession_pids = 64.0\n", "'limits.session_pids' must be a whole number, not float 64.0"),
        ("[limits]\nfilter_pids = 4\n", "'limits.filter_pids' must be a whole number from 16 to 4194304, not 4"),
        ("[limits]\nsession_memory = \"4GB\"\n", "'limits.session_memory' is not a size ('4GB')"),
        ("[limits]\nsession_memory = \"150%\"\n", "'limits.session_memory' is not a size ('150%')"),
        ("[limits]\nsession_tmp_size = \"1k\"\n", "'limits.session_tmp_size' must be at least 1 MiB, not '1k'"),
        ("[limits]\nsession_cpu_shares = 1\n", "'limits.session_cpu_shares' must be a whole number from 2"),
    ],
)
def test_bad_values_name_the_key(text: str, message: str) -> None:
    exc = error_of(text)
    assert exc.message.startswith(f"{SOURCE}: {message}")
    assert exc.hint  # the fix: the key's own help, or what to write instead


def test_network_settings_are_parsed_and_checked() -> None:
    settings = parse_settings(
        '[network]\nallow = ["crates.io", "*.crates.io:443"]\ndeny = ["evil.example"]\n'
        'deny_reasons = { "evil.example" = "exfiltration" }\nupstream_dns = ["10.0.0.2"]\n', SOURCE)
    assert settings.network.allow == ("crates.io", "*.crates.io:443")
    assert settings.network.deny_reasons == {"evil.example": "exfiltration"}
    assert settings.network.upstream_dns == ("10.0.0.2",)


@pytest.mark.parametrize(("text", "message"), [
    ('[network]\nallow = ["*.com"]\n', "'network.allow[0]' is not a valid egress entry ('*.com'): a wildcard needs"),
    ('[network]\nallow = "crates.io"\n', "'network.allow' must be a list of egress entries, not str 'crates.io'"),
    ('[network]\nallow = [1]\n', "'network.allow[0]' must be a string, not int 1"),
    ('[network]\ndeny_reasons = { "x.example" = "r" }\n',
     "'network.deny_reasons.\"x.example\"' is a reason for an entry that is not in deny"),
    ('[network]\nupstream_dns = ["127.0.0.53"]\n',
     "'network.upstream_dns[0]' is a loopback address (127.0.0.53): a loopback resolver"),
    ('[network]\nupstream_dns = ["dns.example"]\n', "'network.upstream_dns[0]' is not an IP address ('dns.example')"),
    ('[network]\nallow = ["a.example", "[2001:db8::1]"]\n', "'network.allow[1]' is an IPv6 entry ('[2001:db8::1]')"),
    ('[network]\nanswer_networks = ["10.0.0.1/8"]\n', "'network.answer_networks[0]' is not a network ('10.0.0.1/8')"),
    ('[credentials]\nupstreams = { "anthropic-api-key" = "http://gw.example" }\n',
     "'credentials.upstreams.anthropic-api-key' must be an https:// URL, or plain http:// to this host's loopback"),
    ('[credentials]\nupstreams = { "Bad_Name" = "https://gw.example" }\n',
     "'credentials.upstreams.Bad_Name' must be kebab-case, not 'Bad_Name'"),
])
def test_bad_network_settings(text: str, message: str) -> None:
    assert message in error_of(text).message


def test_limits_and_overrides_are_parsed() -> None:
    settings = parse_settings('[limits]\nsession_pids = 64\nsession_memory = "96m"\nfilter_memory = "50%"\n'
                              '[network]\nallow = ["169.254.169.254:80"]\nallow_special = ["169.254.169.254:80"]\n',
                              SOURCE)
    assert (settings.limits.session_pids, settings.limits.session_memory) == (64, "96m")
    assert settings.limits.filter_memory == "50%" and settings.limits.session_cpu_shares == 512
    assert settings.network.allow_special == ("169.254.169.254:80",)


def test_reference_lists_every_key() -> None:
    reference = render_settings_reference()
    for key in ("images.base", "images.base_fallback", "images.extra_ca_dir", "session.network",
                "session.stop_timeout", "session.ready_timeout"):
        assert f"`{key}`" in reference
