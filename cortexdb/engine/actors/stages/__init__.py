"""The derivation lane's stages, one module each (extract, index, consolidate, compress) and its
control work (control) and deletion (forget, forget_run, forget_records, forget_events, forget_select, with
the suppressions derivation honours: suppress): functions of a ``common.StageContext``."""
