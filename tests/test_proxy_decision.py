"""One source of truth for the proxy: the script asks the SDK's own HTTP library, never guesses.

make_client(config, progress) decides the proxy once with proxy_for(config, http), through the
library's own
get_environment_proxies() and URLPattern (httpx for openai<3, httpx2 for openai 3.x), and
hands the SDK only that decision: an explicit transport, trust_env off. These tests hold the
decision against the library itself (a Client built the default way, reading the same
environment), then run main() with the real SDK where the decision matters: a dead proxy that
NO_PROXY may or may not bypass, a socks5:// proxy without socksio, an https:// proxy that
speaks plain http. Nothing here depends on which library is installed: each expected outcome
is asked of the library, so the file passes on httpx and httpx2 alike.
"""

import importlib
import importlib.util
import os
import socket

import openai  # no skip: without the SDK these tests must fail, not vanish
import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

import lesson_03_tool_calling_loop as lesson
from tests.provider_server import (
    ARTICLE_FINAL,
    ARTICLE_LINES,
    ARTICLE_TOOL_TURN,
    completion,
    tool_call,
)
from tests.runs import environ_runner

pytestmark = pytest.mark.usefixtures("quick_sdk_retries")
# The library the SDK sends with, found the way make_client() finds it
HTTP = importlib.import_module(openai.DefaultHttpxClient.__mro__[1].__module__)
KEY = "sk-proxy-decision-0123456789abcdef"
PROXY_NAMES = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
NO_PROXY_NAMES = ("NO_PROXY", "no_proxy")
TOOL_TURN, FINAL = ARTICLE_TOOL_TURN, ARTICLE_FINAL


def is_ambient(name):
    """Read by urllib's getproxies() (and so by both libraries), or by the SDK itself."""
    lower = name.lower()
    return (
        lower.endswith("_proxy")
        or lower in ("request_method", "sslkeylogfile")
        or (name.upper().startswith("OPENAI_"))
    )


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch):
    """No proxy or OPENAI_* setting from the machine. SSL_CERT_FILE stays: conftest's small
    trust store keeps each client build cheap."""
    for name in [name for name in os.environ if is_ambient(name)]:
        monkeypatch.delenv(name)


# ---------------------------------------------------------------------------
# What the library itself would do
# ---------------------------------------------------------------------------


def shown(scheme, host, port, target):
    """scheme://host[:port]target, from the parts a connection pool keeps (str or bytes)."""
    scheme, host, target = (
        p.decode("ascii") if isinstance(p, bytes) else p for p in (scheme, host, target)
    )
    return f"{scheme}://{host}{'' if port is None else f':{port}'}{target}"


def proxy_of(transport):
    """The proxy an HTTPTransport of httpx or httpx2 sends through, or None for a direct one.
    Both keep it on the pool: httpcore(2).HTTPProxy and SOCKSProxy hold `_proxy_url` (an
    httpcore URL: scheme, host, port, target, no userinfo); a plain ConnectionPool has none.
    Anything else fails here rather than passing for "direct"."""
    pool = transport._pool
    if type(pool).__name__ == "ConnectionPool":
        return None
    url = pool._proxy_url
    return shown(url.scheme, url.host, url.port, url.target)


def canonical(proxy):
    """A proxy URL string as the transport keeps it: HTTPTransport(proxy=s) parses s with the
    library's URL (Proxy() moves any userinfo into a header), exactly as done here."""
    url = HTTP.URL(proxy)
    return shown(url.raw_scheme, url.raw_host, url.port, url.raw_path)


def library_decision(url):
    """What the library decides for `url` when built the default way in this environment: the
    proxy it would send through, None for direct, or ("raises", type) if the Client cannot
    even be built."""
    try:
        client = HTTP.Client(trust_env=True)
    except Exception as error:
        return ("raises", type(error))
    with client:
        return proxy_of(client._transport_for_url(HTTP.URL(url)))


def config_for(url):
    """check_config()'s answer for `url`, from the variables the script reads in os.environ now
    (where the library reads its proxies), as main(argv, dict(os.environ)) would build it."""
    environ = {**os.environ, "OPENAI_API_KEY": KEY, "OPENAI_MODEL": "m", "OPENAI_BASE_URL": url}
    return lesson.check_config(lesson.read_environment(environ))


def script_decision(url):
    """proxy_for()'s answer on the same scale: (variable, proxy), (), or ("raises", type)."""
    try:
        return lesson.proxy_for(config_for(url), HTTP)
    except Exception as error:
        return ("raises", type(error))


def with_scheme(value):
    return value if "://" in value else f"http://{value}"  # as get_environment_proxies() does


def assert_same_decision(url):
    expected, decided = library_decision(url), script_decision(url)
    environment = {name: os.environ[name] for name in os.environ if is_ambient(name)}
    if decided[:1] == ("raises",):
        assert decided == expected, (url, environment)
        return f"both raise {expected[1].__name__}"
    assert tuple(map(canonical, decided[1:])) == ((expected,) if expected else ()), (
        url,
        environment,
        decided,
        expected,
    )
    if decided:  # the report names the variable whose value the library is using
        setting = [
            name
            for name in PROXY_NAMES
            if os.environ.get(name) and canonical(with_scheme(os.environ[name])) == expected
        ]
        assert [decided[0]] == setting, (url, environment, decided)
    return f"via {decided[0].lower()}" if decided else "direct"


# ---------------------------------------------------------------------------
# 1. proxy_for() decides as the library decides
# ---------------------------------------------------------------------------

NO_PROXY_FORMS = [
    "*",
    "127.0.0.0/8",
    "::1",
    "[::1]",
    "localhost",
    ".example.com",
    "example.com",
    "*.example.com",
    "http://host",
    "127.0.0.1",
    "127.0.0.1:8080",
    "[::1]:8080",
    "::1/128",
    "localhost:8080",
    "api.example.com",
    "sub.api.example.com",
    "http://127.0.0.1:8080",
    "https://api.example.com",
    "10.0.0.0/8",
    "",
]
HOSTS = ["127.0.0.1", "[::1]", "localhost", "api.example.com", "example.com", "sub.api.example.com"]
TARGETS = [
    f"{scheme}://{host}{port}/v1"
    for scheme in ("http", "https")
    for host in HOSTS
    for port in ("", ":8080", ":443")
]


def proxy_value(index):
    """Values for the index-th proxy variable. Each variable has its own port, so the proxy
    in use tells which variable set it. Only http:// and https:// proxies (and the bare
    host:port the library reads as http://): socks5:// needs socksio to build a Client."""
    port = 3101 + index
    values = [
        "",
        f"http://127.0.0.1:{port}",
        f"https://127.0.0.1:{port}",
        f"127.0.0.1:{port}",
        f"http://proxy.internal:{port}/",
        f"http://learner:secret@127.0.0.1:{port}",
    ]
    return st.one_of(st.none(), st.none(), st.sampled_from(values))


NO_PROXY_ENTRY = st.builds(
    lambda before, form, after: before + form + after,
    st.sampled_from(["", " ", "  "]),
    st.sampled_from(NO_PROXY_FORMS),
    st.sampled_from(["", " "]),
)
NO_PROXY_VALUE = st.one_of(st.none(), st.lists(NO_PROXY_ENTRY, max_size=4).map(",".join))
ENVIRONMENTS = st.fixed_dictionaries(
    {
        **{name: proxy_value(index) for index, name in enumerate(PROXY_NAMES)},
        **{name: NO_PROXY_VALUE for name in NO_PROXY_NAMES},
        # urllib drops HTTP_PROXY (not http_proxy) when it thinks it runs as a CGI script
        "REQUEST_METHOD": st.sampled_from([None, None, None, "GET"]),
    }
)


def set_environment(patch, environment):
    for name in (*PROXY_NAMES, *NO_PROXY_NAMES, "REQUEST_METHOD"):
        patch.delenv(name, raising=False)
    for name, value in environment.items():
        if value is not None:
            patch.setenv(name, value)


HTTP_ONLY = {"HTTP_PROXY": "http://127.0.0.1:3101"}


@settings(max_examples=100, deadline=None)  # each example builds a Client: a few ms of TLS setup
@given(environment=ENVIRONMENTS, url=st.sampled_from(TARGETS))
@example(environment={**HTTP_ONLY, "NO_PROXY": "127.0.0.0/8"}, url="http://127.0.0.1:8080/v1")
@example(environment={**HTTP_ONLY, "NO_PROXY": "::1"}, url="http://[::1]:8080/v1")
@example(environment={**HTTP_ONLY, "NO_PROXY": "[::1]"}, url="http://[::1]/v1")
@example(environment={**HTTP_ONLY, "no_proxy": " localhost , ,"}, url="http://localhost:8080/v1")
@example(environment={**HTTP_ONLY, "NO_PROXY": "*.example.com"}, url="http://example.com/v1")
@example(environment={**HTTP_ONLY, "NO_PROXY": ".example.com"}, url="http://sub.api.example.com/v1")
@example(environment={**HTTP_ONLY, "NO_PROXY": "example.com"}, url="http://example.com:8080/v1")
@example(environment={**HTTP_ONLY, "NO_PROXY": "http://host,*"}, url="http://api.example.com/v1")
@example(
    environment={"https_proxy": "127.0.0.1:3104", "HTTPS_PROXY": "http://127.0.0.1:3103"},
    url="https://api.example.com/v1",
)
@example(
    environment={
        "http_proxy": "",
        "HTTP_PROXY": "http://127.0.0.1:3101",
        "ALL_PROXY": "http://127.0.0.1:3105",
    },
    url="http://api.example.com/v1",
)
@example(
    environment={**HTTP_ONLY, "all_proxy": "http://127.0.0.1:3106", "REQUEST_METHOD": "GET"},
    url="http://api.example.com/v1",
)
@example(
    environment={"ALL_PROXY": "https://127.0.0.1:3105", "NO_PROXY": "http://127.0.0.1:8080"},
    url="https://127.0.0.1:8080/v1",
)
def test_the_script_picks_the_proxy_the_http_library_itself_would(environment, url):
    with pytest.MonkeyPatch.context() as patch:
        set_environment(patch, environment)
        event(assert_same_decision(url))  # --hypothesis-show-statistics shows the mix


@pytest.mark.parametrize("form", NO_PROXY_FORMS)
def test_every_no_proxy_form_is_decided_for_every_target_as_the_library_decides(form):
    with pytest.MonkeyPatch.context() as patch:
        set_environment(
            patch, {**HTTP_ONLY, "HTTPS_PROXY": "https://127.0.0.1:3103", "NO_PROXY": form}
        )
        for url in TARGETS:
            assert_same_decision(url)


# ---------------------------------------------------------------------------
# main() with the real SDK, where the decision matters
# ---------------------------------------------------------------------------


@pytest.fixture
def run(provider, capsys, monkeypatch):
    """Run main() in-process with dict(os.environ): the variables go into os.environ too, where
    the HTTP library reads them, as the command line does."""
    return environ_runner(provider, capsys, monkeypatch, KEY)


def report(result):
    """The two stderr lines, as (first, second); fails if there are not exactly two."""
    lines = result.err.splitlines()
    assert len(lines) == 2 and "Traceback" not in result.everything, result.everything
    return lines[0], lines[1]


def dead_proxy():
    """http://127.0.0.1:<port> where nothing listens (the port is free again at once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.parametrize(
    "no_proxy",
    [
        "*",
        "127.0.0.1",
        "localhost,127.0.0.1:{port}",
        "127.0.0.0/8",  # httpx 0.28 does not honour a CIDR here; httpx2 does
        "127.0.0.1:{port}",
        " 127.0.0.1 ,",
        "http://127.0.0.1:{port}",
        "localhost",
        "::1",
    ],
)
def test_a_dead_proxy_is_bypassed_exactly_when_the_library_bypasses_it(run, provider, no_proxy):
    provider.script(TOOL_TURN, FINAL)
    proxy = dead_proxy()
    result = run(HTTP_PROXY=proxy, NO_PROXY=no_proxy.format(port=provider.port))
    decision = library_decision(provider.base_url)  # asked in the same environment
    assert decision in (None, canonical(proxy)), decision
    if decision is None:
        assert (result.code, result.out.splitlines(), result.err) == (0, ARTICLE_LINES, "")
        return
    first, second = report(result)
    assert result.code == 3 and provider.requests == []
    assert first.startswith(f"[SDK/网络] step 1: 请求没能经代理 {proxy}（HTTP_PROXY）送到端点")
    assert "unset HTTP_PROXY" in second and "OPENAI_BASE_URL" not in second


SOCKS = "socks5://127.0.0.1:9"


@pytest.mark.parametrize("no_proxy", ["127.0.0.1", "*", "localhost,127.0.0.1:{port}"])
def test_a_socks_proxy_without_socksio_is_harmless_when_no_proxy_covers_the_endpoint(
    run, provider, no_proxy
):
    assert importlib.util.find_spec("socksio") is None  # the venv has no socks extra
    provider.script(TOOL_TURN, FINAL)
    result = run(ALL_PROXY=SOCKS, NO_PROXY=no_proxy.format(port=provider.port))
    # (A Client built the default way would not even start: it builds every mount, the socks
    # one too. The script builds only the transport it chose.)
    assert lesson.proxy_for(config_for(provider.base_url), HTTP) == ()
    assert (result.code, result.out.splitlines(), result.err) == (0, ARTICLE_LINES, "")


@pytest.mark.parametrize("no_proxy", [None, "localhost", "::1"])
def test_a_socks_proxy_without_socksio_for_the_endpoint_is_a_configuration_error(
    run, provider, no_proxy
):
    assert importlib.util.find_spec("socksio") is None
    result = run(ALL_PROXY=SOCKS, **({} if no_proxy is None else {"NO_PROXY": no_proxy}))
    first, second = report(result)
    assert result.code == 2 and provider.requests == []
    assert first.startswith("[Harness] ") and "ALL_PROXY" in second, result.err
    assert "socksio" in second and "HTTPS_PROXY" not in result.err  # what is set, not all


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "http_proxy", "ALL_PROXY"])
def test_an_https_proxy_that_speaks_plain_http_is_blamed_on_the_proxy(run, provider, variable):
    # The scripted server speaks plain http: as an https:// proxy, the TLS handshake to it fails
    proxy = f"https://127.0.0.1:{provider.port}"
    result = run(**{variable: proxy})  # the endpoint is http://: only the proxy hop has TLS
    first, second = report(result)
    assert result.code == 3 and provider.requests == []
    assert first.startswith(f"[SDK/网络] step 1: 请求没能经代理 {proxy}（{variable}）送到端点")
    assert f"检查 {variable}" in second and f"unset {variable}" in second
    assert "OPENAI_BASE_URL" not in second


# ---------------------------------------------------------------------------
# make_client(): the decision goes to the SDK as it is, and os.environ stays untouched
# ---------------------------------------------------------------------------


def no_progress(text):
    """make_client()'s progress callback: nothing is sent here, so nothing waits."""


URLS = ("http://127.0.0.1:9/v1", "http://api.example.com/v1", "https://api.example.com/v1")


@pytest.mark.parametrize(
    ("variables", "outcomes"),
    [
        (
            {
                "HTTP_PROXY": "http://127.0.0.1:3128",
                "https_proxy": "https://127.0.0.1:3129",
                "NO_PROXY": "localhost, 127.0.0.1,::1",
            },
            [
                (),
                ("HTTP_PROXY", "http://127.0.0.1:3128"),
                ("https_proxy", "https://127.0.0.1:3129"),
            ],
        ),
        ({"ALL_PROXY": SOCKS, "no_proxy": "127.0.0.1"}, [(), 2, 2]),  # 2: no socksio
    ],
    ids=["http-proxies", "socks-proxy"],
)
def test_make_client_leaves_os_environ_exactly_as_it_was(monkeypatch, variables, outcomes):
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    before = dict(os.environ)
    seen = []
    for url in URLS:
        try:
            seen.append(lesson.make_client(config_for(url), no_progress).proxy)
        except lesson.AgentStop as stop:
            seen.append(stop.exit_code)
        assert dict(os.environ) == before, url
    assert seen == outcomes


@pytest.mark.parametrize("url", URLS)
def test_the_sdk_gets_exactly_the_decision_and_reads_no_proxy_variable_itself(monkeypatch, url):
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:3128")
    monkeypatch.setenv("HTTPS_PROXY", "https://127.0.0.1:3129")
    monkeypatch.setenv("NO_PROXY", "127.0.0.0/8,::1,localhost")
    decided = lesson.proxy_for(config_for(url), HTTP)
    client = lesson.make_client(config_for(url), no_progress)
    sent_with = client.client._client  # the SDK's HTTP client
    assert sent_with.trust_env is False and sent_with._mounts == {}
    chosen = sent_with._transport_for_url(HTTP.URL(url))
    assert chosen is sent_with._transport
    assert proxy_of(chosen) == (canonical(decided[1]) if decided else None)
    assert proxy_of(chosen) == library_decision(url)


@pytest.mark.parametrize("no_proxy", ["[::1]", "[::1]:8080", "::1/128"])
def test_a_no_proxy_entry_the_library_cannot_parse_is_a_configuration_error_not_a_crash(
    run, provider, no_proxy
):
    # httpx 0.28 raises InvalidURL for these entries; httpx2 ignores them. Either way the
    # learner sees a configuration report naming the proxy variables, never a traceback.
    provider.script(
        completion(
            tool_calls=[tool_call("call_1", "multiply", '{"a":248,"b":15}')],
            finish_reason="tool_calls",
        ),
        completion(content="248 乘以 15 等于 3720。"),
    )
    result = run(HTTP_PROXY=dead_proxy(), NO_PROXY=f"{no_proxy},127.0.0.1")
    assert "Traceback" not in result.everything, result.everything
    if result.code == 2:
        first, second = report(result)
        assert first.startswith("[Harness] ") and "NO_PROXY" in second
    else:
        assert result.code == 0, result.everything


# ---------------------------------------------------------------------------
# A library without the helpers proxy_for() asks: the SDK decides, and the run goes on
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("via_proxy", [False, True], ids=["direct", "sdk-reads-http-proxy"])
def test_without_the_librarys_proxy_helpers_the_sdk_decides_and_the_run_succeeds(
    run, provider, closed_port_url, monkeypatch, via_proxy
):
    monkeypatch.delattr(HTTP._utils, "get_environment_proxies")
    provider.script(TOOL_TURN, FINAL)
    if via_proxy:  # the endpoint refuses; only the SDK's own reading of HTTP_PROXY gets through
        proxy = provider.base_url.removesuffix("/v1")  # the provider answers as a forward proxy
        result = run(OPENAI_BASE_URL=closed_port_url, HTTP_PROXY=proxy)
    else:
        result = run()
    assert lesson.proxy_for(config_for(closed_port_url), HTTP) is None  # the path under test
    assert (result.code, result.out.splitlines(), result.err) == (0, ARTICLE_LINES, "")
    absolute = [request.path.startswith("http://") for request in provider.requests]
    assert absolute == [via_proxy] * 2
