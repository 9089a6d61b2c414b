# Sphinx configuration of kolo's documentation site (scripts/docs.sh builds it
# into build/docs/html with warnings as errors). Pages are MyST Markdown; the
# Python API comes from the docstrings (autodoc), the C++ API from
# include/kolo/kolo.h through Doxygen's XML and Breathe.
import os
import sys

project = "kolo"
author = "the kolo authors"
copyright = "2026, the kolo authors"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "breathe",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "tools", "charts/README.md"]

# Headings become link targets (the README links into the pages by them).
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]

html_theme = "furo"
html_title = "kolo"
html_static_path = []
html_show_sourcelink = False

# The Python API: kolo's package from the build tree (KOLO_DOCS_PYTHONPATH,
# set by scripts/docs.sh). Frameworks that Debian's Python lacks are mocked;
# torch (Debian's python3-torch) is imported for real.
for p in reversed(os.environ.get("KOLO_DOCS_PYTHONPATH", "").split(os.pathsep)):
    if p:
        sys.path.insert(0, p)
try:  # kolo.tensorflow's dtype table names bfloat16 at import; mocked TF has none
    import ml_dtypes  # noqa: F401
except ImportError:
    import types

    import numpy
    sys.modules["ml_dtypes"] = types.ModuleType("ml_dtypes")
    sys.modules["ml_dtypes"].bfloat16 = numpy.float16  # the API pages only
autodoc_mock_imports = ["tensorflow", "keras", "lightning", "lightning_fabric",
                        "pytorch_lightning", "ray"]
autodoc_default_options = {"members": True, "undoc-members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "none"
napoleon_google_docstring = True

# The C++ API: Doxygen's XML of include/kolo/kolo.h (scripts/docs.sh runs Doxygen).
breathe_projects = {"kolo": os.environ.get("KOLO_DOCS_DOXYGEN_XML", "../build/docs/doxygen/xml")}
breathe_default_project = "kolo"
breathe_default_members = ("members", "undoc-members")

nitpicky = False
# Signatures come from the code, not from a first docstring line (torch's C++
# methods carry pybind11 signatures that Sphinx cannot parse).
autodoc_docstring_signature = False
# A method without a docstring of its own shows none (torch's inherited pybind11
# docstrings are not reStructuredText).
autodoc_inherit_docstrings = False


def _module_docstring_verbatim(app, what, name, obj, options, lines):
    """kolo's module docstrings are design notes in plain text (tables of
    operations, indented lists), not reStructuredText: shown as written."""
    if what == "module" and lines:
        text = list(lines)
        lines[:] = ["::", ""] + ["   " + line for line in text] + [""]


def _functions_and_classes_only(app, what, name, obj, skip, options):
    """A module's members on the API pages are its functions and classes (and
    their methods); module-level data (tables, constants) is implementation."""
    import inspect
    if what == "module" and not (inspect.isclass(obj) or inspect.isroutine(obj)):
        return True
    return None


# The API pages must cover every public function and class of these modules:
# a name the pages leave out is a warning, so the build (-W) fails.
API_MODULES = ["kolo", "kolo.torch", "kolo.torch.elastic", "kolo.torch.process_group", "kolo.elastic",
               "kolo.tensorflow", "kolo.tensorflow.elastic", "kolo.tensorflow.keras",
               "kolo.tensorflow.keras.callbacks", "kolo.tensorflow.keras.elastic", "kolo.lightning",
               "kolo.ray", "kolo.data_cache"]


# The modules users import by name (their imported names are their API).
FACADES = {"kolo", "kolo.torch", "kolo.torch.elastic", "kolo.tensorflow", "kolo.tensorflow.keras"}


def _check_api_coverage(app, env):
    import inspect

    from sphinx.util import logging
    log = logging.getLogger("kolo.api")
    documented = {name.rsplit(".", 1)[-1] for name in env.domaindata["py"]["objects"]}
    for modname in API_MODULES:
        module = sys.modules.get(modname)  # imported by autodoc (with its mocks) when on a page
        if module is None or modname not in env.domaindata["py"]["modules"]:
            log.warning(f"API reference: module {modname} is on no page (docs/api/python.md)")
            continue
        for name, obj in vars(module).items():
            if name.startswith("_") or not (inspect.isclass(obj) or inspect.isroutine(obj)):
                continue
            home = getattr(obj, "__module__", "") or ""
            if not home.startswith("kolo"):
                continue  # an import of torch's, TF's, the standard library's
            if modname not in FACADES and home != modname:
                continue  # a helper the module imports from another of kolo's
            if name not in documented:
                log.warning(f"API reference: {modname}.{name} is on no page (docs/api/python.md)")


def setup(app):
    app.connect("env-check-consistency", _check_api_coverage)
    app.connect("autodoc-process-docstring", _module_docstring_verbatim)
    app.connect("autodoc-skip-member", _functions_and_classes_only)
