"""Optimizers from the trainer config section (``optimizer``, ``lr``, ``momentum``, ``weight_decay``)."""

from __future__ import annotations

import torch


def build_optimizer(model: torch.nn.Module, tcfg: dict) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    name = str(tcfg.get("optimizer", "sgd")).lower()
    lr, wd = float(tcfg.get("lr", 0.01)), float(tcfg.get("weight_decay", 0.0))
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=float(tcfg.get("momentum", 0.9)), weight_decay=wd)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=wd)
    raise ValueError(f"unknown optimizer '{name}'; available: adamw, sgd")
