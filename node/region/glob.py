"""Redis's glob-style patterns (``stringmatchlen``), as KEYS, SCAN MATCH and the ACL's key
patterns read them.

A module of its own, below both the commands (node/commands/keys.py) and the ACL check
(node/security/acl.py), which each match keys against patterns.
"""

from __future__ import annotations


def glob_match(pattern: bytes, s: bytes, nocase: bool = False) -> bool:
    """Redis's ``stringmatchlen``: ``*``, ``?``, ``[a-z]``, ``[^x]``, ``\\`` escapes."""
    if nocase:
        pattern, s = pattern.lower(), s.lower()
    return _match(pattern, 0, s, 0)


def _match(p: bytes, pi: int, s: bytes, si: int) -> bool:
    plen, slen = len(p), len(s)
    while pi < plen and si <= slen:
        c = p[pi]
        if c == 0x2A:  # '*'
            while pi + 1 < plen and p[pi + 1] == 0x2A:
                pi += 1
            if pi + 1 == plen:
                return True
            for k in range(si, slen + 1):
                if _match(p, pi + 1, s, k):
                    return True
            return False
        if si == slen:
            return False
        if c == 0x3F:  # '?'
            si += 1
        elif c == 0x5B:  # '['
            pi += 1
            negate = pi < plen and p[pi] == 0x5E
            if negate:
                pi += 1
            matched = False
            while pi < plen and p[pi] != 0x5D:
                if p[pi] == 0x5C and pi + 1 < plen:
                    pi += 1
                    matched |= p[pi] == s[si]
                elif pi + 2 < plen and p[pi + 1] == 0x2D:
                    lo, hi = p[pi], p[pi + 2]
                    if lo > hi:
                        lo, hi = hi, lo
                    matched |= lo <= s[si] <= hi
                    pi += 2
                else:
                    matched |= p[pi] == s[si]
                pi += 1
            if pi >= plen:
                pi -= 1  # unterminated class: Redis treats the end as closing it
            if negate:
                matched = not matched
            if not matched:
                return False
            si += 1
        else:
            if c == 0x5C and pi + 1 < plen:
                pi += 1
                c = p[pi]
            if c != s[si]:
                return False
            si += 1
        pi += 1
    while pi < plen and p[pi] == 0x2A:
        pi += 1
    return pi == plen and si == slen
