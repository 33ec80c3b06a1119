import torch

from kcal.data.batches import TensorBatches


def test_each_epoch_is_a_new_permutation_of_all_rows():
    x, y = torch.arange(10.0).unsqueeze(1), torch.arange(10)
    batches = TensorBatches(x, y, batch_size=3, shuffle=True, drop_last=False, seed=0)
    assert len(batches) == 4
    epoch1 = torch.cat([b[1] for b in batches])
    epoch2 = torch.cat([b[1] for b in batches])
    assert sorted(epoch1.tolist()) == sorted(epoch2.tolist()) == list(range(10))
    assert not torch.equal(epoch1, epoch2)
    for bx, by in batches:
        assert torch.equal(bx.squeeze(1).long(), by)  # rows stay paired


def test_drop_last_and_determinism():
    x, y = torch.randn(10, 2), torch.arange(10)
    a = TensorBatches(x, y, 4, shuffle=True, drop_last=True, seed=5)
    b = TensorBatches(x, y, 4, shuffle=True, drop_last=True, seed=5)
    assert len(a) == 2
    assert all(torch.equal(p[1], q[1]) for p, q in zip(a, b, strict=True))
    assert [len(bb[1]) for bb in TensorBatches(x, y, 4)] == [4, 4, 2]
