"""OpCounter against operator counts worked out by hand."""
import torch

from acegnn.utils.opcount import OpCounter


def test_counts_kernels_views_and_the_calls_that_read_the_device():
    x = torch.arange(6.0)
    with OpCounter() as ops:
        y = x.view(2, 3)            # a view: no kernel
        z = y + 1                   # a kernel
        kept = z[z > 2]             # gt (kernel), boolean indexing (kernel, sync)
        where = (z > 4).nonzero()   # gt, nonzero (sync)
        big = bool((z > 5).any())   # gt, any, _local_scalar_dense (sync)
        picked = z[0, torch.tensor([0, 2])]  # select (view), index with positions: no sync
    assert kept.tolist() == [3.0, 4.0, 5.0, 6.0] and where.tolist() == [[1, 1], [1, 2]] and big
    assert picked.tolist() == [1.0, 3.0]
    s = ops.summary()
    assert ops.ops["aten.gt"] == 3 and ops.ops["aten.index"] == 2
    assert s["syncs"] == 3
    assert s["sync_ops"] == {"aten.index": 1, "aten.nonzero": 1, "aten._local_scalar_dense": 1}
    # view and select are views; add, gt x3, index x2, nonzero, any, _local_scalar_dense
    # launch kernels (torch.tensor's lift_fresh, a view, is dispatched too)
    assert s["kernels"] == 9
    assert s["dispatched"] == s["kernels"] + ops.views and ops.views >= 2


def test_counts_the_backward_pass_and_nothing_outside_the_block():
    w = torch.ones(3, requires_grad=True)
    (w * 2).sum()  # outside: not counted
    with OpCounter() as ops:
        loss = (w * 2).sum()
        loss.backward()
    assert ops.ops["aten.mul"] >= 2  # forward, and the gradient of the product
    assert ops.summary()["syncs"] == 0
    assert w.grad.tolist() == [2.0, 2.0, 2.0]
