"""The real model that the demo and the grid benchmark use, and surface sampling.

The Stanford Bunny (bunny00.off: 37,706 vertices, 75,408 triangles, a 3D scan) ships with
Debian's libcgal-demo package; scripts/fetch_models.sh puts it in .deps/models/.
"""

from __future__ import annotations

import os
from typing import Optional

import torch

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def find_bunny() -> Optional[str]:
    """Path of bunny00.off: $TILEGRID_MODELS_DIR, then .deps/models; None when absent."""
    for folder in (os.environ.get("TILEGRID_MODELS_DIR"), os.path.join(_ROOT, ".deps", "models")):
        if folder and os.path.isfile(os.path.join(folder, "bunny00.off")):
            return os.path.join(folder, "bunny00.off")
    return None


def sample_surface(vertices: torch.Tensor, faces: torch.Tensor, n: int) -> torch.Tensor:
    """n points spread uniformly over a triangle mesh's surface (triangles drawn by area,
    then uniform barycentric coordinates), on the mesh's device."""
    a, b, c = (vertices[faces[:, i]] for i in range(3))
    area = torch.linalg.cross(b - a, c - a).norm(dim=1)
    tri = torch.multinomial(area, n, replacement=True)
    r1 = torch.rand(n, 1, device=vertices.device).sqrt()
    r2 = torch.rand(n, 1, device=vertices.device)
    return (1 - r1) * a[tri] + r1 * (1 - r2) * b[tri] + r1 * r2 * c[tri]
