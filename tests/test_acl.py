"""Users and permissions (node/security/acl.py, node/commands/acl.py): Redis 8.6's ACL.

The rule grammar and the check on their own, every error text byte for byte, AUTH /
HELLO AUTH, NOPERM at queue time in MULTI and again at EXEC, ACL LOG's fields, the
ACL file saved and loaded, requirepass as the default user's password, and a region
process refusing to start on a broken ACL file.
"""

from __future__ import annotations

import os

import pytest

from node.region.config import Config
from node.security import acl
from node.testing import BraidProcess, InProcessServer
from tests.differential import Err, RawClient


def _user(*rules: str) -> acl.User:
    return acl.set_user_rules(None, "alice", [r.encode() for r in rules])


def _meta(name: str) -> acl.CommandAcl:
    return acl.command_table().by_name[name]


def _allowed(user: acl.User, *argv: str) -> tuple[int, int]:
    args = [a.encode() for a in argv]
    name = argv[0].lower()
    sub = acl.command_table().lookup(f"{name}|{argv[1].lower()}") if len(argv) > 1 else None
    meta = sub if sub is not None and sub.parent else _meta(name)
    return user.check(meta, args)


# ---------------------------------------------------------------- the rule grammar
def test_new_user_is_off_with_nothing():
    u = acl.set_user_rules(None, "bob", [])
    assert u.describe() == "off sanitize-payload resetchannels -@all"


def test_default_user():
    assert acl.default_user().describe() == "on nopass sanitize-payload ~* &* +@all"


def test_command_rules_keep_their_order_and_replace_earlier_ones():
    u = _user("on", "+@stream", "-xdel", "+xgroup|create", "-xgroup", "+xadd", "-xadd")
    # "-xgroup" drops "+xgroup|create"; a second rule for xadd replaces the first
    assert u.root.describe_commands() == "-@all +@stream -xdel -xgroup -xadd"
    u.apply(b"+@all")
    assert u.root.describe_commands() == "+@all"
    u.apply(b"-@dangerous")
    assert u.root.describe_commands() == "+@all -@dangerous"


def test_key_patterns_and_permissions():
    u = _user("~app:*", "%R~ro:*", "%W~wo:*", "%RW~both", "%R~app:*")
    assert u.root.describe_keys() == "~app:* %R~ro:* %W~wo:* ~both"
    u.apply(b"allkeys")
    assert u.root.describe_keys() == "~*"
    u.apply(b"resetkeys")
    assert u.root.describe_keys() == ""


def test_passwords_and_hashes():
    u = _user("on", ">secret", "#" + "a" * 64)
    assert u.passwords == [acl.hash_password(b"secret"), "a" * 64]
    assert u.check_password(b"secret") and not u.check_password(b"other")
    u.apply(b"<secret")
    u.apply(b"!" + b"a" * 64)
    assert u.passwords == [] and not u.check_password(b"secret")
    u.apply(b"nopass")
    assert u.check_password(b"anything")
    u.apply(b"off")
    assert not u.check_password(b"anything")  # a disabled user never authenticates
    u.apply(b"on")
    u.apply(b"resetpass")
    assert not u.nopass and not u.check_password(b"anything")


def test_reset_and_selectors():
    u = _user("on", ">p", "~*", "+@all", "(~x* +xadd)", "(", "%R~y*", "+xlen", ")")
    assert u.describe().endswith("(~x* resetchannels -@all +xadd) (%R~y* resetchannels -@all +xlen)")
    u.apply(b"clearselectors")
    assert len(u.selectors) == 1
    u.apply(b"reset")
    assert u.describe() == "off sanitize-payload resetchannels -@all"


def test_first_argument_rule():
    u = _user("~*", "+select|0")
    assert _allowed(u, "select", "0") == (0, 0)
    assert _allowed(u, "select", "1") == (acl.DENIED_CMD, 0)
    assert u.root.describe_commands() == "-@all +select|0"


def test_categories_follow_redis():
    assert _meta("xadd").categories == {"write", "stream", "fast"}
    assert _meta("xreadgroup").categories == {"write", "stream", "blocking", "slow"}
    assert _meta("xrange").categories == {"read", "stream", "slow"}
    assert _meta("config|set").categories == {"admin", "dangerous", "slow"}
    assert _meta("keys").categories == {"keyspace", "read", "dangerous", "slow"}
    assert _meta("acl|whoami").categories == {"slow"}


# ---------------------------------------------------------------- the check
def test_command_and_key_checks():
    u = _user("on", "~app:*", "%R~ro:*", "%W~wo:*", "+@stream", "-xdel", "+exists")
    assert _allowed(u, "xadd", "app:1", "*", "f", "v") == (0, 0)
    assert _allowed(u, "xadd", "other", "*", "f", "v") == (acl.DENIED_KEY, 1)
    assert _allowed(u, "xadd", "ro:1", "*", "f", "v") == (acl.DENIED_KEY, 1)   # needs write
    assert _allowed(u, "xadd", "wo:1", "*", "f", "v") == (0, 0)                # UPDATE = write only
    assert _allowed(u, "xrange", "ro:1", "-", "+") == (0, 0)
    assert _allowed(u, "xrange", "wo:1", "-", "+") == (acl.DENIED_KEY, 1)      # ACCESS = read
    assert _allowed(u, "xlen", "wo:1") == (0, 0)   # XLEN reads no data (RO without ACCESS)
    assert _allowed(u, "exists", "wo:1") == (0, 0)
    assert _allowed(u, "xdel", "app:1", "1-1") == (acl.DENIED_CMD, 0)
    assert _allowed(u, "ping") == (acl.DENIED_CMD, 0)
    assert _allowed(u, "auth", "x") == (0, 0)  # no-auth commands are always allowed
    # XREAD's keys follow STREAMS: the last key that fails is the one reported
    assert _allowed(u, "xread", "count", "1", "streams", "app:1", "zz", "0", "0") == (acl.DENIED_KEY, 5)
    assert _allowed(u, "xreadgroup", "group", "g", "c", "streams", "ro:1", ">") == (0, 0)
    assert _allowed(u, "xgroup", "create", "zz", "g", "$") == (acl.DENIED_KEY, 2)


def test_several_selectors_pick_the_most_relevant_denial():
    u = _user("on", "~a*", "+xlen", "(~b* +xadd)")
    assert _allowed(u, "xlen", "a1") == (0, 0)
    assert _allowed(u, "xadd", "b1", "*", "f", "v") == (0, 0)
    assert _allowed(u, "xadd", "a1", "*", "f", "v") == (acl.DENIED_KEY, 1)
    assert _allowed(u, "xdel", "a1", "1-1") == (acl.DENIED_CMD, 0)


# ---------------------------------------------------------------- every error text, byte for byte
SETUSER_ERRORS = [
    (["nosuch"], "ERR Error in ACL SETUSER modifier 'nosuch': Syntax error"),
    (["+nosuch"], "ERR Error in ACL SETUSER modifier '+nosuch': Unknown command or category name in ACL"),
    (["+@nosuch"], "ERR Error in ACL SETUSER modifier '+@nosuch': Unknown command or category name in ACL"),
    (["~*", "~foo"], "ERR Error in ACL SETUSER modifier '~foo': Adding a pattern after the * pattern (or the "
                     "'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with "
                     "an empty list of patterns"),
    (["&*", "&x"], "ERR Error in ACL SETUSER modifier '&x': Adding a pattern after the * pattern (or the "
                   "'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to start "
                   "with an empty list of channels"),
    (["<nopw"], "ERR Error in ACL SETUSER modifier '<nopw': The password you are trying to remove from the "
                "user does not exist"),
    (["#abc"], "ERR Error in ACL SETUSER modifier '#abc': The password hash must be exactly 64 characters and "
               "contain only lowercase hexadecimal characters"),
    (["+xgroup|create|x"], "ERR Error in ACL SETUSER modifier '+xgroup|create|x': Allowing first-arg of a "
                           "subcommand is not supported"),
    (["%X~a"], "ERR Error in ACL SETUSER modifier '%X~a': Syntax error"),
    (["(~x", "+xadd"], "ERR Unmatched parenthesis in acl selector starting at '(~x'."),
]


@pytest.fixture(scope="module")
def region():
    with InProcessServer() as srv:
        yield srv


@pytest.fixture
def admin(region):
    c = RawClient(region.port)
    yield c
    for name in c.call("ACL", "USERS"):
        if name != b"default":
            c.call("ACL", "DELUSER", name)
    c.call("ACL", "SETUSER", "default", "reset", "on", "nopass", "~*", "&*", "+@all")
    c.call("ACL", "LOG", "RESET")
    c.close()


@pytest.mark.parametrize(("rules", "error"), SETUSER_ERRORS)
def test_setuser_errors(admin, rules, error):
    assert admin.call("ACL", "SETUSER", "carol", *rules) == Err(error)
    assert admin.call("ACL", "GETUSER", "carol") is None  # nothing of a refused SETUSER stays


COMMAND_ERRORS = [
    (["ACL", "SETUSER", "a b"], "ERR Usernames can't contain spaces or null characters"),
    (["ACL", "DELUSER", "default"], "ERR The 'default' user cannot be removed"),
    (["ACL", "CAT", "nosuch"], "ERR Unknown category 'nosuch'"),
    (["ACL", "GENPASS", "0"], "ERR ACL GENPASS argument must be the number of bits for the output password, "
                              "a positive number up to 4096"),
    (["ACL", "GENPASS", "x"], "ERR value is not an integer or out of range"),
    (["ACL", "LOG", "x"], "ERR value is not an integer or out of range"),
    (["ACL", "LOG", "1", "2"], "ERR unknown subcommand or wrong number of arguments for 'LOG'. Try ACL HELP."),
    (["ACL", "LOAD"], acl.NO_ACLFILE),
    (["ACL", "SAVE"], acl.NO_ACLFILE),
    (["ACL", "DRYRUN", "nouser", "ping"], "ERR User 'nouser' not found"),
    (["ACL", "DRYRUN", "default", "nosuch"], "ERR Command 'nosuch' not found"),
    (["ACL", "DRYRUN", "default", "xgroup", "nope"], "ERR Command 'xgroup' not found"),
    (["ACL", "DRYRUN", "default", "xadd", "k"], "ERR wrong number of arguments for 'xadd' command"),
    (["ACL", "GETUSER"], "ERR wrong number of arguments for 'acl|getuser' command"),
    (["ACL", "NOPE"], "ERR unknown subcommand 'NOPE'. Try ACL HELP."),
    (["AUTH", "a"], "ERR AUTH <password> called without any password configured for the default user. "
                    "Are you sure your configuration is correct?"),
    (["AUTH", "nouser", "x"], "WRONGPASS invalid username-password pair or user is disabled."),
    (["HELLO", "3", "AUTH", "nouser", "x"], "WRONGPASS invalid username-password pair or user is disabled."),
]


@pytest.mark.parametrize(("argv", "error"), COMMAND_ERRORS)
def test_command_errors(admin, argv, error):
    assert admin.call(*argv) == Err(error)


def test_noperm_texts_are_redis_86s(admin, region):
    admin.call("CONFIG", "RESETSTAT")
    admin.call("ACL", "SETUSER", "alice", "on", ">pw", "~app:*", "+@stream", "-xdel")
    c = RawClient(region.port)
    assert c.call("AUTH", "alice", "pw") == b"OK"
    assert c.call("XDEL", "app:1", "1-1") == Err("NOPERM User alice has no permissions to run the 'xdel' command")
    assert c.call("XADD", "other", "*", "f", "v") == Err("NOPERM No permissions to access a key")
    assert c.call("XINFO", "STREAM", "app:1") == Err("ERR no such key")  # allowed: reaches the command
    assert c.call("ACL", "DRYRUN", "alice", "xadd", "other", "*", "f", "v") == Err(
        "NOPERM User alice has no permissions to run the 'acl|dryrun' command")
    assert admin.call("ACL", "DRYRUN", "alice", "xadd", "other", "*", "f", "v") == \
        b"User alice has no permissions to access the 'other' key"
    assert admin.call("ACL", "DRYRUN", "alice", "xdel", "app:1", "1-1") == \
        b"User alice has no permissions to run the 'xdel' command"
    assert admin.call("ACL", "DRYRUN", "alice", "xadd", "app:1", "*", "f", "v") == b"OK"
    stats = admin.call("INFO", "stats").decode()
    assert "acl_access_denied_cmd:2" in stats and "acl_access_denied_key:1" in stats
    assert "acl_access_denied_auth:0" in stats and "acl_access_denied_channel:0" in stats
    c.close()


# ---------------------------------------------------------------- AUTH, HELLO, CLIENT, WHOAMI
def test_auth_hello_and_the_connection_user(admin, region):
    admin.call("ACL", "SETUSER", "alice", "on", ">pw", "+@all", "~*")
    c = RawClient(region.port)
    assert c.call("ACL", "WHOAMI") == b"default"
    assert c.call("AUTH", "alice", "wrong") == Err(acl.WRONGPASS)
    assert c.call("ACL", "WHOAMI") == b"default"
    hello = c.call("HELLO", "2", "AUTH", "alice", "pw", "SETNAME", "worker")
    assert hello[hello.index(b"proto") + 1] == 2
    assert c.call("ACL", "WHOAMI") == b"alice"
    assert b" user=alice " in c.call("CLIENT", "INFO")
    assert b"name=worker" in c.call("CLIENT", "INFO")
    assert any(b" user=alice " in line for line in admin.call("CLIENT", "LIST").splitlines())
    assert c.call("RESET") == b"RESET"
    assert c.call("ACL", "WHOAMI") == b"default"
    admin.call("ACL", "SETUSER", "alice", "off")
    assert c.call("AUTH", "alice", "pw") == Err(acl.WRONGPASS)  # a disabled user cannot log in
    c.close()


def test_deluser_closes_the_users_connections(admin, region):
    admin.call("ACL", "SETUSER", "temp", "on", "nopass", "+@all", "~*")
    c = RawClient(region.port)
    assert c.call("AUTH", "temp", "x") == b"OK"
    assert admin.call("ACL", "DELUSER", "temp", "nosuch") == 1
    with pytest.raises((ConnectionError, OSError)):
        c.call("PING")
    c.close()


def test_client_kill_user(admin, region):
    admin.call("ACL", "SETUSER", "worker", "on", "nopass", "+@all", "~*")
    c = RawClient(region.port)
    c.call("AUTH", "worker", "x")
    assert admin.call("CLIENT", "KILL", "USER", "nosuch") == Err("ERR No such user 'nosuch'")
    assert admin.call("CLIENT", "KILL", "USER", "worker") == 1
    with pytest.raises((ConnectionError, OSError)):
        c.call("PING")
    c.close()


def test_requirepass_is_the_default_users_password():
    with InProcessServer(Config(requirepass="s3cret")) as srv:
        c = RawClient(srv.port)
        assert c.call("XLEN", "k") == Err("NOAUTH Authentication required.")
        assert c.call("AUTH", "nope") == Err(acl.WRONGPASS)
        assert c.call("AUTH", "s3cret") == b"OK"
        assert c.call("ACL", "GETUSER", "default")[1] == [b"on", b"sanitize-payload"]
        assert c.call("CONFIG", "SET", "requirepass", "") == b"OK"
        assert c.call("ACL", "LIST") == [b"user default on nopass sanitize-payload ~* &* +@all"]
        assert c.call("CONFIG", "SET", "requirepass", "new") == b"OK"
        assert c.call("XLEN", "k") == 0  # this connection stays authenticated, as in Redis
        fresh = RawClient(srv.port)
        assert fresh.call("XLEN", "k") == Err("NOAUTH Authentication required.")
        assert fresh.call("AUTH", "default", "new") == b"OK"
        assert c.call("CONFIG", "GET", "aclfile") == [b"aclfile", b""]
        assert c.call("CONFIG", "SET", "aclfile", "/x") == Err(
            "ERR CONFIG SET failed (possibly related to argument 'aclfile') - can't set immutable config")
        c.close()
        fresh.close()


# ---------------------------------------------------------------- MULTI / EXEC
def test_denied_command_in_multi_aborts_the_transaction(admin, region):
    admin.call("ACL", "SETUSER", "alice", "on", ">pw", "~*", "+@all", "-xdel")
    c = RawClient(region.port)
    c.call("AUTH", "alice", "pw")
    assert c.call("MULTI") == b"OK"
    assert c.call("XADD", "k", "*", "f", "v") == b"QUEUED"
    assert c.call("XDEL", "k", "1-1") == Err("NOPERM User alice has no permissions to run the 'xdel' command")
    assert c.call("EXEC") == Err("EXECABORT Transaction discarded because of previous errors.")
    entry = admin.call("ACL", "LOG", "1")[0]
    assert entry[entry.index(b"context") + 1] == b"multi"
    # rules changed after queueing: EXEC checks each command again
    assert c.call("MULTI") == b"OK"
    assert c.call("XLEN", "k") == b"QUEUED"
    admin.call("ACL", "SETUSER", "alice", "-xlen")
    assert c.call("EXEC") == [Err("NOPERM ACLs rules changed between the moment the transaction was accumulated "
                                  "and the EXEC call. This command is no longer allowed for the following "
                                  "reason: no permission to execute the command or subcommand")]
    c.close()


# ---------------------------------------------------------------- ACL LOG
def test_acl_log_fields_and_grouping(admin, region):
    admin.call("ACL", "SETUSER", "alice", "on", ">pw", "~app:*", "+@all")
    c = RawClient(region.port)
    assert c.call("AUTH", "alice", "bad") == Err(acl.WRONGPASS)
    c.call("AUTH", "alice", "pw")
    for _ in range(2):
        c.call("XLEN", "secret")
    log = admin.call("ACL", "LOG")
    assert len(log) == 2
    newest = dict(zip(log[0][::2], log[0][1::2], strict=True))
    assert list(newest) == [b"count", b"reason", b"context", b"object", b"username", b"age-seconds",
                            b"client-info", b"entry-id", b"timestamp-created", b"timestamp-last-updated"]
    assert (newest[b"count"], newest[b"reason"], newest[b"context"], newest[b"object"], newest[b"username"]) == \
        (2, b"key", b"toplevel", b"secret", b"alice")
    assert b" user=alice " in newest[b"client-info"] and b"cmd=xlen" in newest[b"client-info"]
    assert float(newest[b"age-seconds"]) >= 0
    assert newest[b"timestamp-last-updated"] >= newest[b"timestamp-created"]
    auth = dict(zip(log[1][::2], log[1][1::2], strict=True))
    assert (auth[b"reason"], auth[b"object"], auth[b"username"]) == (b"auth", b"AUTH", b"alice")
    assert newest[b"entry-id"] == auth[b"entry-id"] + 1  # ids never repeat (LOG RESET keeps counting)
    assert len(admin.call("ACL", "LOG", "1")) == 1
    admin.call("CONFIG", "SET", "acllog-max-len", "1")
    c.call("XDEL", "other", "1-1")
    assert len(admin.call("ACL", "LOG")) == 1
    admin.call("CONFIG", "SET", "acllog-max-len", "128")
    assert admin.call("ACL", "LOG", "RESET") == b"OK"
    assert admin.call("ACL", "LOG") == []
    c.close()


def test_command_info_shows_the_acl_categories(admin):
    xadd = admin.call("COMMAND", "INFO", "xadd")[0]
    assert xadd[6] == [b"@write", b"@stream", b"@fast"]
    xgroup = admin.call("COMMAND", "INFO", "xgroup")[0]
    create = next(s for s in xgroup[9] if s[0] == b"xgroup|create")
    assert create[6] == [b"@write", b"@stream", b"@slow"]


def test_acl_cat_and_genpass(admin):
    assert b"stream" in admin.call("ACL", "CAT") and len(admin.call("ACL", "CAT")) == 21
    stream = admin.call("ACL", "CAT", "stream")
    assert b"xadd" in stream and b"xgroup|create" in stream and b"ping" not in stream
    assert len(admin.call("ACL", "GENPASS")) == 64
    assert len(admin.call("ACL", "GENPASS", "5")) == 2
    assert admin.call("ACL", "HELP")[0] == b"ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"


# ---------------------------------------------------------------- the ACL file
def test_acl_file_save_and_load_round_trip(tmp_path):
    path = tmp_path / "users.acl"
    path.write_bytes(b"user default on nopass ~* &* +@all\nuser early on nopass ~e* +xlen\n")
    with InProcessServer(Config(aclfile=str(path))) as srv:
        c = RawClient(srv.port)
        assert c.call("ACL", "USERS") == [b"default", b"early"]  # loaded at start
        assert c.call("ACL", "DELUSER", "early") == 1
        assert c.call("ACL", "SETUSER", "alice", "on", ">pw", "%R~ro:*", "+@read", "-xlen", "(~w* +xadd)") == b"OK"
        listed = c.call("ACL", "LIST")
        assert c.call("ACL", "SAVE") == b"OK"
        assert path.read_bytes() == b"".join(line + b"\n" for line in listed)
        assert not [p for p in os.listdir(tmp_path) if p != "users.acl"]  # no temporary file left
        assert c.call("ACL", "DELUSER", "alice") == 1
        assert c.call("ACL", "LOAD") == b"OK"
        assert c.call("ACL", "LIST") == listed
        path.write_bytes(b"user default on nopass ~* &* +@all\nuser bob on +nosuch\nuser carol bad\n")
        err = c.call("ACL", "LOAD")
        assert err == Err(f"ERR {path}:2: Error in applying operation '+nosuch': Unknown command or category "
                          f"name in ACL. {path}:3: Syntax error. WARNING: ACL errors detected, no change to "
                          "the previously active ACL rules was performed")
        assert c.call("ACL", "LIST") == listed  # nothing changed
        c.close()


def test_parse_acl_file_errors():
    users, err = acl.parse_acl_file(b"user a on\nuser a off\n# comment\n", "f.acl")
    assert users == {} and err == ("WARNING: Duplicate user 'a' found on line 2. f.acl:3 should start with user "
                                   "keyword followed by the username. WARNING: ACL errors detected, no change to "
                                   "the previously active ACL rules was performed")


def test_malformed_acl_file_stops_the_region(tmp_path):
    path = tmp_path / "users.acl"
    path.write_bytes(b"user default on nopass ~* +@all\nuser alice on ~* +@nosuch\n")
    region = BraidProcess(extra_args=["--aclfile", str(path)])
    try:
        with pytest.raises(RuntimeError) as failed:
            region.start()
    finally:
        region.stop()
    message = str(failed.value)
    assert message.startswith("braid exited with 1: ")
    assert (f"braid node: aborting startup because of ACL errors: {path}:2: Error in applying operation "
            "'+@nosuch': Unknown command or category name in ACL.") in message
    assert "Traceback" not in message
