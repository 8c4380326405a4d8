"""The descriptions of the commands node/commands/acl.py handles (ACL).

One :func:`~node.commands.table.vocabulary.describe` call per command or subcommand; the
package's docstring (``node/commands/table/__init__.py``) says what each field means.
"""

from __future__ import annotations

from node.commands.table.vocabulary import describe

describe("acl", -2, "sentinel", "acl", group="server", since="6.0.0",
         summary="A container for Access List Control commands.")
describe("acl|setuser", -3, "admin noscript loading stale sentinel", "acl", since="6.0.0",
         summary="Creates and modifies an ACL user and its rules.",
         complexity="O(N). Where N is the number of rules provided.")
describe("acl|getuser", 3, "admin noscript loading stale sentinel", "acl", since="6.0.0",
         summary="Lists the ACL rules of a user.",
         complexity="O(N). Where N is the number of password, command and pattern rules that the user has.")
describe("acl|deluser", -3, "admin noscript loading stale sentinel", "acl", since="6.0.0",
         summary="Deletes ACL users, and terminates their connections.",
         complexity="O(1) amortized time considering the typical user.")
describe("acl|list", 2, "admin noscript loading stale sentinel", "acl", since="6.0.0",
         summary="Dumps the effective rules in ACL file format.",
         complexity="O(N). Where N is the number of configured users.")
describe("acl|users", 2, "admin noscript loading stale sentinel", "acl", since="6.0.0",
         summary="Lists all ACL users.",
         complexity="O(N). Where N is the number of configured users.")
describe("acl|whoami", 2, "noscript loading stale sentinel", "acl", since="6.0.0",
         summary="Returns the authenticated username of the current connection.",
         complexity="O(1)")
describe("acl|load", 2, "admin noscript loading stale sentinel", "acl", since="6.0.0",
         summary="Reloads the rules from the configured ACL file.",
         complexity="O(N). Where N is the number of configured users.")
describe("acl|save", 2, "admin noscript loading stale sentinel", "acl", since="6.0.0",
         summary="Saves the effective ACL rules in the configured ACL file.",
         complexity="O(N). Where N is the number of configured users.")
describe("acl|cat", -2, "noscript loading stale sentinel", "acl", since="6.0.0",
         summary="Lists the ACL categories, or the commands inside a category.",
         complexity="O(1) since the categories and commands are a fixed set.")
describe("acl|genpass", -2, "noscript loading stale sentinel", "acl", since="6.0.0",
         summary="Generates a pseudorandom, secure password that can be used to identify ACL users.",
         complexity="O(N)")
describe("acl|log", -2, "admin noscript loading stale sentinel", "acl", since="6.0.0",
         summary="Lists recent security events generated due to ACL rules.",
         complexity="O(N) with N being the number of entries shown.")
describe("acl|dryrun", -4, "admin noscript loading stale sentinel", "acl", since="7.0.0",
         summary="Simulates the execution of a command by a user, without executing the command.",
         complexity="O(1).")
describe("acl|help", 2, "loading stale sentinel", "acl", since="6.0.0",
         summary="Returns helpful text about the different subcommands.",
         complexity="O(1)")
