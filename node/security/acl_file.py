"""The ACL file (``aclfile``): one ``user <name> <rules...>`` line per user, as Redis writes it.

:func:`parse_acl_file` checks a whole file before anything of it is used (and says what is
wrong where, as Redis does); :func:`load_acl_file` reads and parses one;
:func:`render_acl_file` and :func:`save_acl_file` write the users back, the file replaced
atomically.
"""

from __future__ import annotations

import os
import tempfile

from node.security.acl_users import RuleError, User, _has_spaces, _text, merge_selector_args, new_user


# ---------------------------------------------------------------- the ACL file
def split_line(line: bytes) -> list[bytes]:
    """sdssplitlen(line, " "): single spaces separate; empty pieces stay (and are no-ops)."""
    return line.split(b" ")


def parse_acl_file(data: bytes, filename: str) -> tuple[dict[str, User], str | None]:
    """ACLLoadFromFile's checks: the users of a whole file, or Redis's one-line error."""
    users: dict[str, User] = {}
    errors = ""
    for i, raw in enumerate(data.split(b"\n")):
        linenum = i + 1
        line = raw.strip(b" \t\r\n")
        if not line:
            continue
        argv = split_line(line)
        if argv[0] != b"user" or len(argv) < 2:
            errors += f"{filename}:{linenum} should start with user keyword followed by the username. "
            continue
        name = argv[1]
        if _has_spaces(name):
            errors += f"'{filename}:{linenum}: username '{_text(name)}' contains invalid characters. "
            continue
        uname = _text(name)
        if uname in users:
            errors += f"WARNING: Duplicate user '{uname}' found on line {linenum}. "
            continue
        user = new_user(uname)
        users[uname] = user
        merged = merge_selector_args(argv[2:])
        if isinstance(merged, int):
            errors += f"{filename}:{linenum}: Unmatched parenthesis in selector definition."
            merged = []
        syntax_error = False
        for op in merged:
            op = op.strip(b"\t\r\n")
            try:
                user.apply(op)
            except RuleError as e:
                if e.code == "ENOENT":
                    errors += f"{filename}:{linenum}: Error in applying operation '{_text(op)}': {e}. "
                elif not syntax_error:
                    errors += f"{filename}:{linenum}: {e}. "
                    syntax_error = True
    if errors:
        return {}, errors + "WARNING: ACL errors detected, no change to the previously active ACL rules was performed"
    return users, None


def render_acl_file(users: dict[str, User]) -> bytes:
    return b"".join(f"user {name} {users[name].describe()}\n".encode("utf-8", "surrogateescape")
                    for name in sorted(users, key=lambda n: n.encode("utf-8", "surrogateescape")))


def save_acl_file(path: str, users: dict[str, User]) -> None:
    """ACLSaveToFile: a temporary file beside it, fsynced, renamed over it, directory fsynced."""
    data = render_acl_file(users)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_acl_file(path: str) -> tuple[dict[str, User], str | None]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        return {}, f"Error loading ACLs, opening file '{path}': {e.strerror}"
    return parse_acl_file(data, path)
