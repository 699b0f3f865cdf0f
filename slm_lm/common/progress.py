"""Progress bars that leave no line behind, so that a command's stderr ends with its summary or its one
error line, whether its work finished or failed."""
from tqdm import tqdm


def progress_bar(iterable=None, **options) -> tqdm:
    """A tqdm bar on stderr, erased when it closes (``leave=False``). Open it in a ``with`` block: the bar is
    then closed, and erased, before the command prints anything else, even when the work inside fails."""
    return tqdm(iterable, leave=False, **options)
