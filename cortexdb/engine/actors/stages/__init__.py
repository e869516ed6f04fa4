"""The derivation lane's stages, one module each (extract, index, consolidate, compress) and its
control work (control): functions of a ``common.StageContext``."""
