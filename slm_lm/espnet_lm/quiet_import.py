"""ESPnet imported without nltk's download messages.

ESPnet's phoneme tokenizers import g2p_en, which calls `nltk.download` for its tagger and dictionary when they
are not installed: with no network, each import printed eight `[nltk_data] Error loading ...` lines on
stderr, before any message of the command. The download is still tried; only its messages are dropped.
"""
import contextlib
import functools
import io


@contextlib.contextmanager
def quiet_nltk_downloads():
    """Within the block, `nltk.download` runs quietly, its error messages written nowhere; nltk as it was
    after the block (nothing to do where nltk is not installed)."""
    try:
        import nltk
    except ImportError:
        yield
        return
    download = nltk.download
    nltk.download = functools.partial(download, quiet=True, print_error_to=io.StringIO())
    try:
        yield
    finally:
        nltk.download = download
