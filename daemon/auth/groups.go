package auth

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/codumentor/codumentor/daemon/audit"
)

// A group membership's source says who keeps it: SetGroups replaces
// one source's memberships of a user and leaves the others.
const (
	GroupSourceLocal = "local" // an administrator (API, codumentorctl)
	GroupSourceLDAP  = "ldap"  // the directory, at each sign-in
	GroupSourceOIDC  = "oidc"  // the provider's groups claim, at each sign-in
)

var (
	// ErrInvalidGroup refuses a group name that breaks ValidateGroup, a
	// source that is none of the GroupSource constants, or more than
	// MaxGroups groups.
	ErrInvalidGroup = errors.New("auth: invalid group")
	// ErrGroupExists refuses to create a group whose name is taken.
	ErrGroupExists = errors.New("auth: group exists")
	// ErrGroupNotFound is returned for a group that does not exist.
	ErrGroupNotFound = errors.New("auth: group not found")
)

// Group is a row of table user_groups: a name that users belong to
// through memberships (table group_members) from one or more sources,
// and that repository access entries and auth.admin_groups name. The
// directory's groups and local ones share the names: "devs" from LDAP
// and a local "devs" are one group.
type Group struct {
	Name    string    `gorm:"primaryKey" json:"name"`
	Created time.Time `gorm:"not null" json:"created"`
	// Members are the group's members with their sources, by user name;
	// filled in by Groups only.
	Members []GroupMember `gorm:"-" json:"members"`
}

func (Group) TableName() string { return "user_groups" }

// GroupMember is a row of table group_members: UserID belongs to Group
// because Source says so.
type GroupMember struct {
	Group  string `gorm:"column:group_name;primaryKey" json:"-"`
	UserID string `gorm:"primaryKey;index" json:"user_id"`
	Source string `gorm:"primaryKey" json:"source"`
	// UserName is filled in by Groups only.
	UserName string `gorm:"-" json:"user"`
}

func (GroupMember) TableName() string { return "group_members" }

// MaxGroupName is the longest group name, in bytes; MaxGroups the most
// groups one source may give a user.
const (
	MaxGroupName = 256
	MaxGroups    = 1000
)

// NormalizeGroup lower-cases name (directories compare group names
// without case) and checks it: 1 to MaxGroupName bytes of one-line
// UTF-8 text, no leading or trailing space. The error wraps
// ErrInvalidGroup.
func NormalizeGroup(name string) (string, error) {
	n := strings.ToLower(name)
	switch {
	case n == "" || len(n) > MaxGroupName:
		return "", fmt.Errorf("%w: name must be 1 to %d bytes", ErrInvalidGroup, MaxGroupName)
	case !utf8.ValidString(n) || strings.ContainsFunc(n, unicode.IsControl):
		return "", fmt.Errorf("%w: name must be one line of UTF-8 text", ErrInvalidGroup)
	case strings.TrimSpace(n) != n:
		return "", fmt.Errorf("%w: name %q begins or ends with a space", ErrInvalidGroup, n)
	}
	return n, nil
}

// SetAdminGroups sets auth.admin_groups: their members are made
// administrators when their groups are next set (SetGroups, at each
// sign-in, and local membership changes), and lose the role again once
// they belong to none, unless it was given to them otherwise.
func (us *Users) SetAdminGroups(groups []string) error {
	var norm []string
	for _, g := range groups {
		n, err := NormalizeGroup(g)
		if err != nil {
			return fmt.Errorf("auth.admin_groups: %w", err)
		}
		norm = append(norm, n)
	}
	us.adminGroups.Store(&norm)
	return nil
}

func (us *Users) admins() []string {
	if p := us.adminGroups.Load(); p != nil {
		return *p
	}
	return nil
}

// SetGroups replaces the user's memberships of source (GroupSourceLDAP at
// an LDAP sign-in, GroupSourceOIDC at an OIDC one) with groups, creating
// the groups that do not exist yet, and re-evaluates auth.admin_groups
// for the user, all in one transaction. Names are normalized
// (NormalizeGroup) and deduplicated; an invalid one, or more than
// MaxGroups, refuses the whole set (ErrInvalidGroup) and changes
// nothing.
func (us *Users) SetGroups(ctx context.Context, userID, source string, groups []string) error {
	if source != GroupSourceLocal && source != GroupSourceLDAP && source != GroupSourceOIDC {
		return fmt.Errorf("%w: unknown source %q", ErrInvalidGroup, source)
	}
	if len(groups) > MaxGroups {
		return fmt.Errorf("%w: %d groups; at most %d", ErrInvalidGroup, len(groups), MaxGroups)
	}
	norm := make([]string, 0, len(groups))
	for _, g := range groups {
		n, err := NormalizeGroup(g)
		if err != nil {
			return err
		}
		norm = append(norm, n)
	}
	slices.Sort(norm)
	norm = slices.Compact(norm)
	return us.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var have []string
		if err := tx.Model(&GroupMember{}).Where("user_id = ? AND source = ?", userID, source).Order("group_name").Pluck("group_name", &have).Error; err != nil {
			return fmt.Errorf("auth: reading the groups of %s: %w", userID, err)
		}
		if !slices.Equal(have, norm) {
			if err := tx.Where("user_id = ? AND source = ?", userID, source).Delete(&GroupMember{}).Error; err != nil {
				return fmt.Errorf("auth: replacing the groups of %s: %w", userID, err)
			}
			if len(norm) > 0 {
				now := time.Now().UTC()
				gs := make([]Group, len(norm))
				ms := make([]GroupMember, len(norm))
				for i, n := range norm {
					gs[i] = Group{Name: n, Created: now}
					ms[i] = GroupMember{Group: n, UserID: userID, Source: source}
				}
				if err := tx.Clauses(clause.OnConflict{DoNothing: true}).CreateInBatches(gs, 100).Error; err != nil {
					return fmt.Errorf("auth: creating groups: %w", err)
				}
				if err := tx.CreateInBatches(ms, 100).Error; err != nil {
					return fmt.Errorf("auth: setting the groups of %s: %w", userID, err)
				}
			}
		}
		return us.evalAdmin(tx, userID, source)
	})
}

// evalAdmin applies auth.admin_groups to the user, in tx: a member of one
// becomes an administrator (AdminByGroup), and one made so who is a
// member of none any more is a user again. An administrator made so
// otherwise (users add --admin, the API) keeps the role. by is who
// changed the groups, for the audit record of a role change.
func (us *Users) evalAdmin(tx *gorm.DB, userID, by string) error {
	admins := us.admins()
	var u User
	if err := tx.Where("id = ?", userID).Take(&u).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return fmt.Errorf("%w: %s", ErrUserNotFound, userID)
		}
		return fmt.Errorf("auth: reading user %s: %w", userID, err)
	}
	member := false
	if len(admins) > 0 {
		var n int64
		if err := tx.Model(&GroupMember{}).Where("user_id = ? AND group_name IN ?", userID, admins).Count(&n).Error; err != nil {
			return fmt.Errorf("auth: reading the groups of %s: %w", userID, err)
		}
		member = n > 0
	}
	var cols map[string]any
	switch {
	case member && u.Role != RoleAdmin:
		cols = map[string]any{"role": RoleAdmin, "admin_by_group": true}
	case !member && u.AdminByGroup:
		cols = map[string]any{"role": RoleUser, "admin_by_group": false}
	default:
		return nil
	}
	cols["updated"] = time.Now().UTC()
	if err := tx.Model(&User{}).Where("id = ?", userID).Updates(cols).Error; err != nil {
		return fmt.Errorf("auth: updating the role of %s: %w", u.Name, err)
	}
	_, err := audit.Append(tx, audit.Entry{Kind: audit.KindAdmin, User: by, Data: map[string]any{
		"action": "user_role", "name": u.Name, "role": cols["role"], "reason": "auth.admin_groups"}})
	return err
}

// AddGroup creates an empty local group; by is who does it (an
// administrator's ID, or CommandLine), for the audit log.
func (us *Users) AddGroup(ctx context.Context, by, name string) (Group, error) {
	n, err := NormalizeGroup(name)
	if err != nil {
		return Group{}, err
	}
	g := Group{Name: n, Created: time.Now().UTC(), Members: []GroupMember{}}
	err = us.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := us.checkAdmin(tx, by); err != nil {
			return err
		}
		if err := tx.Create(&g).Error; err != nil {
			return err
		}
		_, err := audit.Append(tx, audit.Entry{Kind: audit.KindAdmin, User: by, Data: map[string]any{"action": "group_add", "group": n}})
		return err
	})
	switch {
	case errors.Is(err, gorm.ErrDuplicatedKey):
		return Group{}, fmt.Errorf("%w: %s", ErrGroupExists, n)
	case errors.Is(err, ErrNotAdmin):
		return Group{}, err
	case err != nil:
		return Group{}, fmt.Errorf("auth: adding group %s: %w", n, err)
	}
	return g, nil
}

// DeleteGroup removes a group and all its memberships, whatever their
// source (a directory's group comes back at its members' next sign-in);
// repository access entries naming it stay, and apply again if it does.
func (us *Users) DeleteGroup(ctx context.Context, by, name string) error {
	n, err := NormalizeGroup(name)
	if err != nil {
		return err
	}
	return us.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := us.checkAdmin(tx, by); err != nil {
			return err
		}
		var members []string
		if err := tx.Model(&GroupMember{}).Where("group_name = ?", n).Distinct().Pluck("user_id", &members).Error; err != nil {
			return err
		}
		res := tx.Where("name = ?", n).Delete(&Group{})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return fmt.Errorf("%w: %s", ErrGroupNotFound, n)
		}
		if err := tx.Where("group_name = ?", n).Delete(&GroupMember{}).Error; err != nil {
			return err
		}
		if _, err := audit.Append(tx, audit.Entry{Kind: audit.KindAdmin, User: by, Data: map[string]any{"action": "group_delete", "group": n}}); err != nil {
			return err
		}
		for _, m := range members {
			if err := us.evalAdmin(tx, m, by); err != nil {
				return err
			}
		}
		return nil
	})
}

// SetMember adds the user called user to local group group (member
// true) or removes that local membership (false); memberships from a
// directory are the directory's. auth.admin_groups is re-evaluated for
// the user at once.
func (us *Users) SetMember(ctx context.Context, by, group, user string, member bool) error {
	n, err := NormalizeGroup(group)
	if err != nil {
		return err
	}
	return us.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := us.checkAdmin(tx, by); err != nil {
			return err
		}
		var g Group
		if err := tx.Where("name = ?", n).Take(&g).Error; errors.Is(err, gorm.ErrRecordNotFound) {
			return fmt.Errorf("%w: %s", ErrGroupNotFound, n)
		} else if err != nil {
			return err
		}
		var u User
		if err := tx.Where("name = ?", user).Take(&u).Error; errors.Is(err, gorm.ErrRecordNotFound) {
			return fmt.Errorf("%w: %s", ErrUserNotFound, user)
		} else if err != nil {
			return err
		}
		m := GroupMember{Group: n, UserID: u.ID, Source: GroupSourceLocal}
		action := "group_member_add"
		if member {
			if err := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&m).Error; err != nil {
				return err
			}
		} else {
			action = "group_member_remove"
			if err := tx.Where(&m).Delete(&GroupMember{}).Error; err != nil {
				return err
			}
		}
		if _, err := audit.Append(tx, audit.Entry{Kind: audit.KindAdmin, User: by, Data: map[string]any{"action": action, "group": n, "name": u.Name}}); err != nil {
			return err
		}
		return us.evalAdmin(tx, u.ID, by)
	})
}

// checkAdmin refuses, in tx, an administrator's change once they are no
// longer an enabled administrator (as create does).
func (us *Users) checkAdmin(tx *gorm.DB, by string) error {
	if by == "" || by == CommandLine {
		return nil
	}
	var n int64
	if err := tx.Model(&User{}).Where("id = ? AND role = ? AND disabled = ?", by, RoleAdmin, false).Count(&n).Error; err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w: %s", ErrNotAdmin, by)
	}
	return nil
}

// Groups returns every group with its members, by name.
func (us *Users) Groups(ctx context.Context) ([]Group, error) {
	gs := []Group{}
	db := us.db.WithContext(ctx)
	if err := db.Order("name").Find(&gs).Error; err != nil {
		return nil, fmt.Errorf("auth: listing groups: %w", err)
	}
	var rows []struct {
		GroupName, UserID, Source, Name string
	}
	if err := db.Table("group_members m").Select("m.group_name, m.user_id, m.source, u.name").
		Joins("JOIN users u ON u.id = m.user_id").Order("m.group_name, u.name, m.source").Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("auth: listing group members: %w", err)
	}
	byName := map[string]*Group{}
	for i := range gs {
		gs[i].Members = []GroupMember{}
		byName[gs[i].Name] = &gs[i]
	}
	for _, r := range rows {
		if g := byName[r.GroupName]; g != nil {
			g.Members = append(g.Members, GroupMember{UserID: r.UserID, Source: r.Source, UserName: r.Name})
		}
	}
	return gs, nil
}

// GroupsOf returns the names of the groups the user belongs to, from any
// source, sorted.
func (us *Users) GroupsOf(ctx context.Context, userID string) ([]string, error) {
	gs := []string{}
	if err := us.db.WithContext(ctx).Model(&GroupMember{}).Where("user_id = ?", userID).Distinct().Order("group_name").Pluck("group_name", &gs).Error; err != nil {
		return nil, fmt.Errorf("auth: reading the groups of %s: %w", userID, err)
	}
	return gs, nil
}
