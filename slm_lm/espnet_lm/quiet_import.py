"""ESPnet imported without the messages its import prints that are no concern of the user.

ESPnet's phoneme tokenizers import g2p_en, which calls `nltk.download` for its tagger and dictionary when they
are not installed: with no network, each import printed eight `[nltk_data] Error loading ...` lines on
stderr, before any message of the command. The download is still tried; only its messages are dropped.
Some ESPnet modules (espnet2.enh, espnet2.asr) decorate functions with `torch.cuda.amp.autocast`, which torch
has deprecated: each import printed `FutureWarning`s about ESPnet's own code. Those from espnet2's modules
are ignored during the import; every other warning still shows. ESPnet's transformer attention prints
`Failed to import Flash Attention, ...` on standard output when flash_attn is not installed (it is optional):
standard output is held during the import and dropped.
"""
import contextlib
import functools
import io
import warnings


@contextlib.contextmanager
def quiet_espnet_import():
    """Within the block, `nltk.download` runs quietly, its error messages written nowhere, FutureWarnings
    raised from espnet2's modules are ignored and standard output is dropped; nltk, the warning filters and
    standard output as they were after the block."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"espnet2\.")
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
