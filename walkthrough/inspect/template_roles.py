"""The message roles a chat template knows: the common four and every role its source compares with.

The message editor accepts only these as a message's role (a sentence typed in
the role field became the role, and the template skipped the message). A name
counts when the template compares something called `role` with it: `message.role
== 'tool'`, `message['role'] in ['ipython', 'tool']`, `role != "developer"` (a
variable named after the role, as templates set it). The source is parsed, not
run or compiled (compiling folds constants, which a hostile template can make
costly); a source that does not parse, or is longer than `MAX_SOURCE`, gives the
common four.

Example: known_roles("{% if m.role == 'ipython' %}...{% endif %}")
    -> ("system", "user", "assistant", "tool", "ipython")
"""

from __future__ import annotations

from jinja2 import nodes

COMMON_ROLES = ("system", "user", "assistant", "tool")
MAX_SOURCE = 1 << 20  # characters parsed; chat templates are a few KiB
MAX_ROLE = 40  # characters of a role name taken from a template


def known_roles(source: str | None) -> tuple[str, ...]:
    """The common roles, then the other role names `source` compares with, in its order."""
    found = [name for name in _compared_names(source) if name not in COMMON_ROLES]
    return COMMON_ROLES + tuple(dict.fromkeys(found))


def _compared_names(source: str | None) -> list[str]:
    if not source or len(source) > MAX_SOURCE:
        return []
    from walkthrough.inspect.jinja_env import environment

    try:
        tree = environment().parse(source)
    except Exception:  # noqa: BLE001  any syntax error, or nesting too deep: no names found
        return []
    names: list[str] = []
    for compare in tree.find_all(nodes.Compare):
        sides = [compare.expr, *(operand.expr for operand in compare.ops)]
        if any(_is_role(side) for side in sides):
            names += [name for side in sides for name in _strings(side)]
    return [
        name
        for name in names
        if 0 < len(name) <= MAX_ROLE and name.isprintable() and name.strip() == name
    ]


def _is_role(node: nodes.Node) -> bool:
    """`x.role`, `x['role']` or a variable whose name holds "role"."""
    if isinstance(node, nodes.Getattr):
        return node.attr == "role"
    if isinstance(node, nodes.Getitem):
        return isinstance(node.arg, nodes.Const) and node.arg.value == "role"
    return isinstance(node, nodes.Name) and "role" in node.name


def _strings(node: nodes.Node) -> list[str]:
    """The string constants of `node`: itself, or the items of a list or tuple."""
    if isinstance(node, nodes.Const):
        return [node.value] if isinstance(node.value, str) else []
    if isinstance(node, (nodes.List, nodes.Tuple)):
        return [
            item.value
            for item in node.items
            if isinstance(item, nodes.Const) and isinstance(item.value, str)
        ]
    return []
