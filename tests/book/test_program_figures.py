"""Chapter 2's pictures of a launch (tritonforge.book.program_figures)."""

import pytest
import torch

from tritonforge.book import program_figures


def test_storage_map_places_a_transposed_view():
    base = torch.zeros(3, 4)
    values = torch.arange(12, dtype=torch.int32).view(4, 3)  # one value per element of base.t()
    mapped = program_figures.storage_map(base.t(), base, values)
    assert torch.equal(mapped, values.t())  # element (i, j) of the view is base[j, i]
    sliced = program_figures.storage_map(base[:, ::2], base, torch.ones(3, 2, dtype=torch.int32))
    assert sliced[:, 1::2].eq(-1).all() and sliced[:, ::2].eq(1).all()


def test_plot_program_map_draws_two_panels():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    base = torch.zeros(6, 16, device="cuda" if torch.cuda.is_available() else "cpu")  # where kernels run
    fig = program_figures.plot_program_map(6, 8, 4, 4, view=base[:, ::2], base=base, device=base.device)
    assert len(fig.axes) == 2
    import matplotlib.pyplot as plt

    plt.close(fig)
