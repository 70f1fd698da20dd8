"""Sphinx configuration of tilegrid's API reference (scripts/build_docs.sh builds it).

The pages document the tilegrid that Python imports (scripts/setup.sh installs it from this
tree); the reference is the docstrings, Google style ("Args:", "Returns:"), read by napoleon.
"""

import tilegrid

project = "tilegrid"
release = tilegrid.__version__
version = release

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon"]

# Google-style sections only; a class's "Args:" describe its constructor's arguments.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
autoclass_content = "class"
autodoc_member_order = "bysource"
# A method without a docstring of its own is left out rather than shown with its base class's
# (torch.nn.Module.forward's text says nothing about ours).
autodoc_inherit_docstrings = False
autodoc_typehints = "signature"
# Type hints are shown as written (`Optional[torch.Tensor]`), not resolved to torch's own
# documentation, which this build does not link to.
autodoc_typehints_format = "short"

html_theme = "alabaster"
html_title = f"tilegrid {release} API reference"
exclude_patterns = ["_build"]
