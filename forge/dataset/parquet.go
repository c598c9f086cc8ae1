package dataset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"
)

// parquetDocuments streams the string column field of a Parquet file,
// row group by row group, page by page; null and empty values are
// skipped.
func parquetDocuments(ctx context.Context, path, field string, fn func(string) error) (err error) {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("dataset: %v", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("dataset: %v", err)
	}
	defer func() {
		// The decoder may panic on a damaged file; it is the file's fault.
		if r := recover(); r != nil {
			err = fmt.Errorf("dataset: %s: not a readable Parquet file (%v); re-download or remove it", path, r)
		}
	}()
	pf, err := parquet.OpenFile(f, fi.Size(), parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return fmt.Errorf("dataset: %s: not a readable Parquet file (%v); re-download or remove it", path, err)
	}
	leaf, ok := pf.Schema().Lookup(field)
	if !ok {
		var cols []string
		for _, p := range pf.Schema().Columns() {
			cols = append(cols, strings.Join(p, "."))
		}
		sort.Strings(cols)
		return fmt.Errorf("dataset: %s has no column %q (columns: %s); choose the text column with --field", path, field, strings.Join(cols, ", "))
	}
	if k := leaf.Node.Type().Kind(); k != parquet.ByteArray {
		return fmt.Errorf("dataset: %s: column %q holds %v, not text; choose the text column with --field", path, field, k)
	}
	buf := make([]parquet.Value, 256)
	row := 0
	for _, rg := range pf.RowGroups() {
		if err := ctx.Err(); err != nil {
			return err
		}
		pages := rg.ColumnChunks()[leaf.ColumnIndex].Pages()
		for {
			p, err := pages.ReadPage()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				pages.Close()
				return fmt.Errorf("dataset: %s: row %d: %v (the file is damaged or truncated)", path, row, err)
			}
			vals := p.Values()
			for {
				n, err := vals.ReadValues(buf)
				for _, v := range buf[:n] {
					row++
					if v.IsNull() {
						continue
					}
					b := v.ByteArray()
					if len(b) == 0 {
						continue
					}
					if !utf8.Valid(b) {
						pages.Close()
						return fmt.Errorf("dataset: %s: row %d of column %q is not UTF-8", path, row, field)
					}
					if err := fn(string(b)); err != nil {
						pages.Close()
						return err
					}
				}
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					pages.Close()
					return fmt.Errorf("dataset: %s: row %d: %v (the file is damaged or truncated)", path, row, err)
				}
			}
			parquet.Release(p)
		}
		pages.Close()
	}
	return nil
}
