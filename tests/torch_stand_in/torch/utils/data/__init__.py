from .dataloader import DataLoader  # noqa: F401
__all__ = ["DataLoader"]  # re-exports, as torch's
