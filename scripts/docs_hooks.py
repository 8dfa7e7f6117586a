"""MkDocs hook (mkdocs.yml ``hooks:``): the reference pages, generated at each build from the
code's declarations (campaign/cli/reference.py), so they never fall behind it."""

from __future__ import annotations

from mkdocs.structure.files import File


def on_files(files, config):
    from campaign.cli.reference import pages

    for path, text in pages().items():
        files.append(File.generated(config, path, content=text))
    return files
