"""Sphinx configuration of robokernel_ros's documentation (MyST Markdown pages).

Built two ways from this one folder:
- `make docs` (part of `make test`): sphinx-build -W --keep-going docs docs/_build/html,
  in the shell env.sh gives (robokernel_ros importable), warnings as errors.
- rosdoc2 (docs.ros.org's tool): `robokernel_ros/doc` links here, rosdoc2's standard
  location of a package's Sphinx project; rosdoc2 execs this file inside its own
  conf.py (so nothing here depends on __file__) and adds its theme and intersphinx.

No network: no intersphinx mapping of our own, no remote images.
"""

import logging

project = "robokernel_ros"
author = "robokernel maintainers"
copyright = "robokernel maintainers, Apache-2.0"
release = "0.1.0"
version = "0.1"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinxarg.ext",
]

root_doc = "index"
# The index's glob entries (`workcell_*`, `*`) pick up pages other people add; one that
# matches nothing yet is not an error (setup() below: Sphinx 9 gives this warning no
# type, so suppress_warnings cannot name it).
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
# _build: `make docs`'s output. The rest is what rosdoc2 writes beside a copy of this
# folder (its landing page, sphinx-apidoc's pages, a second copy of the pages under doc/):
# this site has its own index and API page, so they are left out of the build.
exclude_patterns = [
    "_build",
    "README.md",
    "doc",
    "user_docs*.rst",
    "modules.rst",
    "robokernel_ros.rst",
    "robokernel_ros.*.rst",
    "__readme_include.rst",
    "standards.rst",
    "standard_docs",
    "user_docs",
    "interfaces",
    "generated",
    "sphinx_output",
]

# Flags stay as typed: no "--resume" turned into an en dash, no curly quotes in JSON.
smartquotes = False

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_default_options = {"members": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
# The optional LeRobot extra and the live view's SDK are not needed to read the API.
autodoc_mock_imports = ["torch", "lerobot"]

html_theme = "alabaster"
html_title = "robokernel_ros"
html_show_sourcelink = False


def _docstring_as_written(app, what, name, obj, options, lines):
    """Show a docstring as its author laid it out (a literal block).

    This project's docstrings are plain text (usage lines indented, `code` in
    backticks), not reStructuredText: parsed as RST they would warn on every indented
    usage line. The signature and type hints still come from autodoc.
    """
    if not any(line.strip() for line in lines):
        return
    body = [("    " + line) if line.strip() else "" for line in lines]
    lines[:] = ["::", "", *body, ""]


class _EmptyGlobIsFine(logging.Filter):
    """Drop the warning that a toctree glob matched no page (and only that one)."""

    def filter(self, record):
        return getattr(record, "subtype", None) != "empty_glob"


def setup(app):
    app.connect("autodoc-process-docstring", _docstring_as_written)
    logging.getLogger("sphinx.sphinx.directives.other").addFilter(_EmptyGlobIsFine())
    return {"parallel_read_safe": True}
