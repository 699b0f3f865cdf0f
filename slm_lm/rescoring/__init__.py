"""N-best rescoring: N-best readers, score matrices, weight search, WER and BLEU, reports, MT reranking."""
