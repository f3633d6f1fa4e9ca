"""torch.utils.data.DataLoader's iteration shape in torch 2.13: the iterator's
__next__ runs inside record_function(self._profile_name), named after the
iterator's class. Only batch_size=None over a sequence is supported here."""
import torch


class DataLoader:
    def __init__(self, dataset, batch_size=None):
        if batch_size is not None:
            raise NotImplementedError("the stand-in DataLoader takes batch_size=None")
        self.dataset = dataset

    def __iter__(self):
        return _SingleProcessDataLoaderIter(self)


class _BaseDataLoaderIter:
    def __init__(self, loader):
        self._dataset = loader.dataset
        self._sampler_iter = iter(range(len(loader.dataset)))
        self._num_yielded = 0
        self._profile_name = f"enumerate(DataLoader)#{self.__class__.__name__}.__next__"

    def __iter__(self):
        return self

    def __next__(self):
        with torch.autograd.profiler.record_function(self._profile_name):
            data = self._next_data()
            self._num_yielded += 1
            return data


class _SingleProcessDataLoaderIter(_BaseDataLoaderIter):
    def _next_data(self):
        return self._dataset[next(self._sampler_iter)]    # may raise StopIteration
